"""Custom users built on vllm_users.LLMUser (docs/custom_scenarios.md): `vllm-locust run -f FILE`."""
