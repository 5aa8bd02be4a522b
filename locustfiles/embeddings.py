"""Embeddings load test: `locust -f locustfiles/embeddings.py --host http://127.0.0.1:8000 --endpoint embeddings`.

--embed-batch N inputs per request, each --input-len tokens; E2EL only (docs/scenarios.md "Embeddings and rerank").
"""

from vllm_users.scenarios.pooling import EmbeddingsUser

__all__ = ["EmbeddingsUser"]
