"""The vLLM server's Prometheus metric names that vllm-locust reads (its /metrics, scraped during a run).

Below every user of them: the master's live view (vllm_users.distributed.views.live) and its counters around the load
(vllm_users.measure.server_counters), the CLI's sampler and run summary (orchestration.server.metrics_sampler).
"""

from __future__ import annotations

__all__ = [
    "AVERAGED",
    "GEN_TOKENS",
    "GPU_UTIL",
    "HISTOGRAMS",
    "KEPT_PREFIXES",
    "KV_USAGE",
    "PREEMPTIONS",
    "PREFIX_HITS",
    "PREFIX_QUERIES",
    "PROMPT_TOKENS",
    "REQUEST_SUCCESS",
    "RUNNING",
    "WAITING",
]

KEPT_PREFIXES = ("vllm:", "DCGM_")  # families worth keeping; the rest (python_gc_*, process_*) is noise

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # v1 name, then the v0 name
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
GEN_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
# requests the engine finished, labelled by finished_reason (stop, length, abort, error, repetition): the same name
# since vLLM v0; a client's disconnect aborts a request without counting it (vllm_users.measure.server_counters)
REQUEST_SUCCESS = "vllm:request_success_total"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "queue_time": "vllm:request_queue_time_seconds",
    "e2el": "vllm:e2e_request_latency_seconds",
    "itl": "vllm:inter_token_latency_seconds",
}
# gauges that are fractions: averaged over their labels (engines), not summed (a sum of percentages is meaningless)
AVERAGED = (*KV_USAGE, GPU_UTIL)
