"""How faithfully a `--trace` run replayed its trace: send times against the trace's, requests sent against the
trace's window, and (mooncake) the prefix reuse the trace's hash ids imply against the server's prefix-cache hits.

Computed once by the master from all of the run's records (warm-up and cool-down included: fidelity is about the
whole replay, not the measured window) and written as result.json's `replay`; absent when the run replayed no trace.
Fields (docs/traces.md, "Replaying"):
- `trace_requests`: requests of the trace in the window (after --trace-start/--trace-duration/--num-prompts);
  `scheduled`: those on the open-loop schedule (a request outside a session, or a session's first turn);
- `sent`: requests sent (records that are not `dropped`: completed, failed and interrupted ones), `dropped`: due
  but never sent, `not_sent` = trace_requests - sent (dropped ones, and session turns never reached);
- `lag_ms`: send time less intended time (t0 + offset / --time-scale) of the scheduled requests sent: p50, p90,
  p99, max, mean; None when none was sent;
- `expected_block_reuse`: mooncake only, the fraction of prompt tokens in blocks whose hash id came earlier in
  the trace; `server_prefix_hit_rate`: the server's prefix-cache hits over queries (tokens) during the load;
  `reuse_gap_points`: (hit rate - reuse) * 100. Each None when it does not apply or the server does not say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vllm_users.measure.columns import Records, as_columns
from vllm_users.measure.metrics import sent_rows
from vllm_users.measure.server_counters import LoadCounters
from vllm_users.measure.server_metric_names import PREFIX_HITS, PREFIX_QUERIES

__all__ = ["LAG_PERCENTILES", "replay_fidelity", "server_hit_rate"]

LAG_PERCENTILES = (50, 90, 99)


def server_hit_rate(counters: LoadCounters | None) -> float | None:
    """The server's prefix-cache hit rate (tokens) over the load; None without its counters or queries."""
    if counters is None:
        return None
    hits, queries = counters.delta(PREFIX_HITS), counters.delta(PREFIX_QUERIES)
    return hits / queries if hits is not None and queries else None


def replay_fidelity(
    records: Records,
    *,
    trace: Mapping[str, Any],
    trace_requests: int,
    scheduled: int,
    expected_reuse: float | None,
    hit_rate: float | None,
) -> dict[str, Any]:
    """result.json's `replay` of a trace run: `trace` (path, format, time_scale, window, skipped) is copied in."""
    c = as_columns(records)
    every = np.arange(c.n, dtype=np.int64)
    sent = sent_rows(c, every)
    ts, ti = c.a["t_start"], c.a["t_intended"]
    on_schedule = sent[~np.isnan(ti[sent])]
    lag = (ts[on_schedule] - ti[on_schedule]) * 1000.0
    lag_ms: dict[str, float] | None = None
    if lag.size:
        lag_ms = {
            f"p{p}": float(v)
            for p, v in zip(LAG_PERCENTILES, np.percentile(lag, LAG_PERCENTILES), strict=True)
        }
        lag_ms.update(max=float(lag.max()), mean=float(lag.mean()))
    n_sent = int(sent.size)
    gap = (hit_rate - expected_reuse) * 100.0 if hit_rate is not None and expected_reuse is not None else None
    return {
        **dict(trace),
        "trace_requests": trace_requests,
        "scheduled": scheduled,
        "sent": n_sent,
        "dropped": int(every.size - sent.size),
        "not_sent": max(0, trace_requests - n_sent),
        "all_sent": n_sent >= trace_requests,
        "lag_ms": lag_ms,
        "expected_block_reuse": expected_reuse,
        "server_prefix_hit_rate": hit_rate,
        "reuse_gap_points": gap,
    }
