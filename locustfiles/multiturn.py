"""Multi-turn conversations with prefix reuse: `locust -f locustfiles/multiturn.py --host http://127.0.0.1:8000`.

--num-turns N, --prefix-len TOKENS, --cache-rate F, --num-prefixes K; results report TTFT by turn and
the prefix-cache hit rate (vLLM needs --enable-prompt-tokens-details for cached_tokens).
"""

from vllm_users.scenarios.multiturn import MultiTurnUser

__all__ = ["MultiTurnUser"]
