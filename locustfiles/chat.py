"""Chat load test: `locust -f locustfiles/chat.py --host http://127.0.0.1:8000 [--processes N]`.

Options of vllm-locust (`--input-len`, `--request-rate`, ...) are listed by `locust -f locustfiles/chat.py --help`.
"""

from vllm_users.scenarios.chat import ChatUser

__all__ = ["ChatUser"]
