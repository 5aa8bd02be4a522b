"""The server's Prometheus counters around a run's load: its request count (server_served) and prefix-cache hits.

`vllm-locust run`'s sampler (orchestration.server.metrics_sampler) scrapes /metrics once before it starts the master, so
after the preflight and before the first load request, and writes that scrape with its URL as the first line of
server_metrics.jsonl. After the drain the master scrapes the same URL once more
(vllm_users.distributed.server_scrape.around_load): the counters' increases between the two are the load's, the
preflight's requests not among them. This module only computes; the HTTP calls live there, above measure/.

- server_served: the increase of `vllm:request_success_total`, summed over its `finished_reason` labels (stop,
  length, abort, error, repetition). vLLM counts a request there when its engine finishes it, whatever the
  reason, an engine-side error too; it does not count a request the client abandoned (a disconnect aborts
  it without stats, vLLM 0.32 OutputProcessor.abort_requests) nor one refused before the engine (HTTP 400).
  Another client's requests in the same window count too. A server without the counter: None, never 0.
- prefix-cache hits: `vllm:prefix_cache_hits_total` over `vllm:prefix_cache_queries_total` (tokens).

With several --server-metrics URLs (replicas) each has its own samples file (run_dir.server_metrics_name) with its
URL in the first line, and `around_load_more` there takes the others' counters the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.measure.server_metric_names import (
    AVERAGED,
    KEPT_PREFIXES,
    PREFIX_HITS,
    PREFIX_QUERIES,
    REQUEST_SUCCESS,
)

__all__ = [
    "PREFIX_HIT_WARN",
    "BucketRange",
    "RANDOM_PROMPT_SCENARIOS",
    "LoadCounters",
    "QUANTILES",
    "counter_delta",
    "histogram_stats",
    "parse_metrics",
    "prefix_cache_warning",
    "prompt_cache_hits",
    "quantile_range",
    "range_text",
    "read_samples",
]

# a random-prompt run whose prompt tokens were cached beyond its chat template's share by more than this
# fraction resent prompts the server had seen (a previous run with the same --seed)
PREFIX_HIT_WARN = 0.10
RANDOM_PROMPT_SCENARIOS = frozenset(
    {"chat", "burst"}
)  # fresh random text per request (no history, no schema)


def parse_metrics(text: str) -> dict[str, float]:
    """Flatten Prometheus text into {series: value}, labels summed (or averaged for fraction gauges)."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.startswith(KEPT_PREFIXES) or s.name.endswith("_created"):
                continue
            key = f"{s.name}|{s.labels['le']}" if s.name.endswith("_bucket") and "le" in s.labels else s.name
            v = float(s.value)
            if math.isnan(v):
                continue
            sums[key] = sums.get(key, 0.0) + v
            counts[key] = counts.get(key, 0) + 1
    for key in sums:
        if key in AVERAGED:
            sums[key] /= counts[key]
    return sums


def read_samples(path: str) -> tuple[list[dict[str, Any]], int]:
    """Read server_metrics.jsonl: (good samples in time order, number of error or torn lines)."""
    out: list[dict[str, Any]] = []
    bad = 0
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(row, dict) and isinstance(row.get("v"), dict) and "t" in row:
                out.append(row)
            else:
                bad += 1
    out.sort(key=lambda r: r["t"])
    return out, bad


def counter_delta(first: dict[str, float], last: dict[str, float], name: str) -> float | None:
    """A counter's increase from `first` to `last`; None when `last` lacks it; a reset (restart) counts from 0."""
    if name not in last:
        return None
    d = last[name] - first.get(name, 0.0)
    return d if d >= 0 else last[name]


# the percentiles of a server histogram that results give, each as the bucket it falls in
QUANTILES = (50, 90, 99)
BucketRange = list[float | None]  # [lower edge ms, upper edge ms or None past the last finite edge]


def histogram_stats(first: dict[str, float], last: dict[str, float], name: str) -> dict[str, Any] | None:
    """Count, mean in ms (exact: sum over count) and `p50_range`/`p90_range`/`p99_range` of a Prometheus
    histogram's increase between two samples, each the bucket [lower, upper] ms the percentile falls in; None
    when it has no observation. A histogram places a percentile no closer than its bucket: a point interpolated
    inside one would read as a measurement, 6.2 ms beside a client's 9.0 from a bucket of 5-10."""
    count = counter_delta(first, last, name + "_count")
    total = counter_delta(first, last, name + "_sum")
    if not count or total is None:
        return None
    bounds = _bounds(first, last, name)
    out: dict[str, Any] = {"count": count, "mean": total / count * 1000.0}
    for p in QUANTILES:
        out[f"p{p}_range"] = quantile_range(bounds, p / 100.0, count)
    return out


def _bounds(first: dict[str, float], last: dict[str, float], name: str) -> list[tuple[float, float]]:
    """(upper edge, cumulative count) of each bucket's increase, in order."""
    prefix = name + "_bucket|"
    return sorted(
        (float(k[len(prefix) :]), (counter_delta(first, last, k) or 0.0))
        for k in last
        if k.startswith(prefix)
    )


def quantile_range(bounds: Sequence[tuple[float, float]], q: float, count: float) -> BucketRange:
    """The bucket holding rank q*count (Prometheus histogram_quantile's rule), as [lower edge ms, upper edge ms];
    the upper edge None when the rank lies past the last finite edge (the +Inf bucket)."""
    rank = q * count
    prev_le = 0.0
    for le, c in bounds:
        if c >= rank:
            return [prev_le * 1000.0, None if math.isinf(le) else le * 1000.0]
        prev_le = le
    return [prev_le * 1000.0, None]


def range_text(r: Sequence[float | None] | None) -> str:
    """A bucket range as a table cell: "5-10", ">10" past the last finite edge, "-" without one."""
    if not r:
        return "-"
    lo, hi = r[0], r[1]
    if hi is None:
        return f">{float(lo or 0.0):.4g}"
    return f"{float(lo or 0.0):.4g}-{float(hi):.4g}"


@dataclass(frozen=True)
class LoadCounters:
    """The server's metrics just before the load and just after the drain."""

    url: str
    before: dict[str, float]
    after: dict[str, float]

    def delta(self, names: str | Sequence[str]) -> float | None:
        """The increase of the first of `names` the server exports; None when it exports none."""
        for name in (names,) if isinstance(names, str) else names:
            if name in self.after:
                return counter_delta(self.before, self.after, name)
        return None

    @property
    def served(self) -> int | None:
        """Requests the server finished during the load (vllm:request_success_total); None without the counter."""
        d = self.delta(REQUEST_SUCCESS)
        return None if d is None else int(round(d))


def prompt_cache_hits(counters: LoadCounters | None, metrics: dict[str, Any]) -> tuple[float, str] | None:
    """The share of the load's prompt tokens the server answered from its prefix cache, and where that comes
    from: the server's counters, else usage's cached_tokens in the records; None where neither says."""
    hits = queries = None
    if counters is not None:
        hits, queries = counters.delta(PREFIX_HITS), counters.delta(PREFIX_QUERIES)
    if hits is not None and queries:
        return (
            hits / queries,
            f"{hits:.0f} of {queries:.0f} prompt tokens, the server's prefix-cache counters",
        )
    if metrics.get(K.CACHED_TOKENS_REPORTED) and metrics.get(K.PREFIX_CACHE_HIT_RATE) is not None:
        return float(metrics[K.PREFIX_CACHE_HIT_RATE]), "usage's cached_tokens"
    return None


def prefix_cache_warning(
    counters: LoadCounters | None,
    metrics: dict[str, Any],
    scenarios: Sequence[str],
    shared_prompts: bool,
    overhead_tokens: int | None,
) -> str | None:
    """The warning for a random-prompt run (only `chat`/`burst` users, no dataset, no shared prefix:
    `shared_prompts` False) whose prompts hit the prefix cache beyond the chat template's share: the server had
    seen them (a previous run with the same --seed); None otherwise. Hits from the server's counters, else from
    usage's cached_tokens in the records."""
    if shared_prompts or not scenarios or not set(scenarios) <= RANDOM_PROMPT_SCENARIOS:
        return None
    hit = prompt_cache_hits(counters, metrics)
    if hit is None:
        return None
    frac, source = hit
    prompt = metrics.get(K.INPUT_LEN_ACTUAL_MEAN) or (metrics.get(K.TOTAL_INPUT_TOKENS) or 0) / max(
        1, metrics.get(K.COMPLETED) or 0
    )
    share = min(1.0, overhead_tokens / prompt) if isinstance(overhead_tokens, int) and prompt else 0.0
    if frac - share <= PREFIX_HIT_WARN:
        return None
    return (
        f"PREFIX CACHE HITS in a random-prompt run: {frac:.0%} of the prompt tokens were cached ({source}); "
        "the server had seen these prompts (a previous run with the same --seed), so TTFT is lower than for "
        "new prompts. Use a fresh --seed, or --reset-prefix-cache"
    )
