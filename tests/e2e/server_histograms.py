"""vLLM's own histograms over one run: scrape /metrics in full before and after, take the difference.

    before = scrape_full(url); ...load...; figures = delta(before, scrape_full(url))
    figures["request_time_per_output_token_seconds"]["mean"]   # the server's mean TPOT over that run

Used by tests/e2e/test_agreement_vllm_bench.py (each tool's run beside the server's view of it) and
benchmarks/agreement_gap.py.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.vllm_env import metric_samples

HISTOGRAMS = ("time_to_first_token_seconds", "request_queue_time_seconds", "request_prefill_time_seconds",
              "request_decode_time_seconds", "inter_token_latency_seconds",
              "request_time_per_output_token_seconds", "e2e_request_latency_seconds",
              "request_inference_time_seconds", "iteration_tokens_total", "request_prompt_tokens")  # fmt: skip
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
            "vllm:prefix_cache_hits_total", "process_cpu_seconds_total")  # fmt: skip


def scrape_full(url: str) -> dict[tuple[str, str], float]:
    """Every sample of /metrics, histogram buckets included: (name, le or '') -> value summed over labels."""
    out: dict[tuple[str, str], float] = {}
    for name, labels, value in metric_samples(url):
        key = (name, labels.get("le", ""))
        out[key] = out.get(key, 0.0) + value
    return out


def _quantile(buckets: list[tuple[float, float]], count: float, q: float) -> float:
    """Prometheus histogram_quantile: linear inside the bucket that holds rank q*count."""
    rank, lo, prev = q * count, 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * ((rank - prev) / (cum - prev) if cum > prev else 0.0)
        lo, prev = le, cum
    return lo


def delta(before: dict, after: dict) -> dict[str, Any]:
    """Per histogram: count, mean, p50, p90 of the samples added between the two scrapes; counters' deltas."""
    out: dict[str, Any] = {}
    for h in HISTOGRAMS:
        name = "vllm:" + h
        cnt = after.get((name + "_count", ""), 0) - before.get((name + "_count", ""), 0)
        tot = after.get((name + "_sum", ""), 0) - before.get((name + "_sum", ""), 0)
        les = sorted({le for (n, le) in after if n == name + "_bucket"}, key=float)
        buckets = [
            (float(le), after[(name + "_bucket", le)] - before.get((name + "_bucket", le), 0)) for le in les
        ]
        if cnt:
            out[h] = {"count": cnt, "mean": tot / cnt, "p50": _quantile(buckets, cnt, 0.5),
                      "p90": _quantile(buckets, cnt, 0.9)}  # fmt: skip
    for c in COUNTERS:
        out[c] = after.get((c, ""), 0) - before.get((c, ""), 0)
    return out
