"""The vLLM server's Prometheus metric names that vllm-locust reads (its /metrics, scraped during a run).

Below every user of them: the master's live view (vllm_users.distributed.views.live) and its counters around the load
(vllm_users.measure.server_counters), the CLI's sampler and run summary (orchestration.server.metrics_sampler).
"""

from __future__ import annotations

__all__ = [
    "AVERAGED",
    "ENGINE_TPOT",
    "ENGINE_TTFT",
    "GEN_TOKENS",
    "GPU_UTIL",
    "HISTOGRAMS",
    "KEPT_PREFIXES",
    "KV_USAGE",
    "PREEMPTIONS",
    "PREFILL_TIME",
    "PREFIX_HITS",
    "PREFIX_QUERIES",
    "PROMPT_TOKENS",
    "QUEUE_TIME",
    "REQUEST_SUCCESS",
    "RUNNING",
    "SPEC_ACCEPTED",
    "SPEC_DRAFTS",
    "SPEC_DRAFT_TOKENS",
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
# where a TTFT goes (vllm_users.measure.latency_breakdown): the engine's stages, measured by vLLM from the request's
# arrival at its engine client (after the API server parsed, templated and tokenised it) to its first token
QUEUE_TIME = "vllm:request_queue_time_seconds"  # waiting for a batch slot
PREFILL_TIME = "vllm:request_prefill_time_seconds"  # scheduled until its first token
ENGINE_TTFT = "vllm:time_to_first_token_seconds"
# TPOT as the engine sees it, the first the server exports: per request (vLLM v1, request-weighted like the
# client's TPOT), then v0's per-token name (deprecated in v1), then inter-token latency (per token)
ENGINE_TPOT = (
    "vllm:request_time_per_output_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
)
# speculative decoding (vLLM v1): draft steps, tokens proposed, tokens accepted
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
HISTOGRAMS = {
    "ttft": ENGINE_TTFT,
    "queue_time": QUEUE_TIME,
    "e2el": "vllm:e2e_request_latency_seconds",
    "itl": "vllm:inter_token_latency_seconds",
}
# gauges that are fractions: averaged over their labels (engines), not summed (a sum of percentages is meaningless)
AVERAGED = (*KV_USAGE, GPU_UTIL)
