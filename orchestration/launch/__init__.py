"""`vllm-locust run`'s processes: the Locust master and workers, their progress, and the master's port."""
