"""The load that was applied: the offered and the achieved request rate of a run, over its steady interior.

The window rule, one for a run, a sweep point and a search step: the interior is the arrivals between the first
and the last tenth (by their intended start, or their start in a closed loop; the edges half-way between two
arrivals). The offered rate is the interior's arrivals over its length; the achieved rate the completions in the
same window shifted by the median latency, over its length. At a run's edges a request can only cross out of a
whole-run window, never in (the ramp: the first requests, answered before the server is full; the drain: the
last, with nothing behind them), so whole-run figures read low; in the interior one crosses in as often as one
crosses out, and only the server's lag counts. An open loop whose achieved rate is below
(1 - DELIVERY_TOLERANCE) x its offered rate did not get its load: the server (or a --max-concurrency cap) held
it back, and its latencies are those of a lighter load than the one asked for."""

from __future__ import annotations

from typing import Any

import numpy as np

from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import Columns

__all__ = ["DELIVERY_TOLERANCE", "delivery", "interior", "shortfall_text", "steady"]

DELIVERY_TOLERANCE = 0.10  # a short Poisson run's own rate is a few % off; 10 % short is the server's doing
MIN_REQUESTS = 10  # fewer completions: no interior to speak of


def interior(times: np.ndarray) -> tuple[float, float, float] | None:
    """(events per second, window start, window end) of `times` (s) between their first and last tenth; None
    when too few to have an interior."""
    t = np.sort(times)
    n = t.size
    if n < 3:
        return None
    k = max(1, n // 10)
    # the edges half-way between events, not on one: an event on an edge would count whole for half a gap
    a, b = float(t[k - 1] + t[k]) / 2, float(t[n - 1 - k] + t[n - k]) / 2
    if b <= a:
        return None
    return (n - 2 * k) / (b - a), a, b


def delivery(c: Columns, ok: np.ndarray, good: np.ndarray | None = None) -> dict[str, Any] | None:
    """The run's `delivery` block from its successes `ok` (row numbers; `good`: those of them that met the SLO):
    the achieved rate and concurrency over the completions' interior and, for an open loop, the offered rate
    over the schedule's, whether the loop got its rate and the goodput against the offered load; None when too
    few requests completed to have an interior."""
    if ok.size < MIN_REQUESTS:
        return None
    starts = c.a["t_start"][ok]
    ends = starts + c.a["end_us"][ok] / 1e6
    intended = c.a["t_intended"][ok]
    open_loop = bool((~np.isnan(intended)).all())
    sched = np.where(np.isnan(intended), starts, intended)  # a closed loop has no schedule: its starts
    arrivals = interior(sched)
    if arrivals is None:
        return None
    offered, a, b = arrivals
    # the completions of the same window, shifted by the median latency (from the intended start): a request
    # crosses in as often as one crosses out, so only the server's lag counts
    lag = float(np.median(ends - sched))
    in_window = (ends >= a + lag) & (ends <= b + lag)
    achieved = int(in_window.sum()) / (b - a)
    tokens = c.a["output_tokens"][ok][in_window]
    # mean requests in flight over the window: each request's time inside it, over its length (Little's law)
    inside = np.clip(np.minimum(ends, b + lag) - np.maximum(starts, a + lag), 0.0, None)
    out: dict[str, Any] = {
        "achieved_rate": achieved,
        # the completions' tokens in the window: the steady output rate a step's cost is priced at
        K.OUTPUT_THROUGHPUT: float(np.clip(tokens, 0, None).sum()) / (b - a),
        "achieved_concurrency": float(inside.sum() / (b - a)),
        "window_s": b - a,
        "tolerance": DELIVERY_TOLERANCE,
    }
    if open_loop:  # its schedule is the load offered
        out["offered_rate"] = offered
        out["achieved_fraction"] = achieved / offered
        out["delivered"] = bool(achieved >= (1.0 - DELIVERY_TOLERANCE) * offered)
        if good is not None:
            out["goodput_of_offered"] = int((in_window & good).sum()) / (b - a) / offered
    return out


def shortfall_text(d: dict[str, Any] | None) -> str | None:
    """'achieved 12.71 of the offered 20.00 req/s (64 %, more than 10 % short): not delivered'; None when
    the load was delivered or the run was no open loop."""
    if not d or d.get("delivered", True):
        return None
    return (
        f"achieved {d['achieved_rate']:.2f} of the offered {d['offered_rate']:.2f} req/s "
        f"({d['achieved_fraction']:.1%}, more than {d['tolerance']:.0%} short): not delivered"
    )


def steady(res: dict[str, Any], key: str) -> Any:
    """A result's `key` (request or output throughput) over its steady interior where the result has one (its
    `delivery` block), else the whole-run figure: what a plot across runs puts on its throughput axis."""
    d = res.get(K.DELIVERY) or {}
    if key == K.REQUEST_THROUGHPUT and d.get("achieved_rate") is not None:
        return d["achieved_rate"]
    if key == K.OUTPUT_THROUGHPUT and d.get(K.OUTPUT_THROUGHPUT) is not None:
        return d[K.OUTPUT_THROUGHPUT]
    return res.get(key)
