"""Rerank load test: `locust -f locustfiles/rerank.py --host http://127.0.0.1:8000 --endpoint rerank` (or score).

One query and --rerank-docs N documents per request, each --input-len tokens; /v1/score with --endpoint score.
"""

from vllm_users.scenarios.pooling import RerankUser

__all__ = ["RerankUser"]
