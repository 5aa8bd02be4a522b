"""The load that was applied: the offered and the achieved request rate of a run, over its steady interior.

The window rule, one for a run, a sweep point and a search step's rates: the interior is the arrivals (their
intended start; a closed loop's start) after the first tenth and the first requests' answer time (the ramp: the
batch fills) and before the last tenth and the last requests' answer time (the drain: the batch empties, the
last answers come faster). The offered rate is the interior's arrivals over its span. The achieved rate is the
offered one over (1 + the latency's trend): a server that keeps up answers each arrival as fast as the one
before, one that falls behind adds a little per arrival, and its completions come at its capacity. Counting
completions in a window is biased by the ramp and the drain: over a whole run a step at 17.78 req/s read 15.2,
and a window shifted by the median latency read 119 % of the offered rate when the drain sped the last answers.
An open loop whose achieved rate is below (1 - DELIVERY_TOLERANCE) x its offered rate did not get its load:
the server (or a --max-concurrency cap) held it back, and its latencies are those of a lighter load than the one
asked for. Fewer than MIN_JUDGED requests in the interior: the rates are stated, the delivery is not judged."""

from __future__ import annotations

from typing import Any

import numpy as np

from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import Columns

__all__ = ["DELIVERY_TOLERANCE", "delivery", "shortfall_text", "steady", "steady_rows"]

DELIVERY_TOLERANCE = 0.10  # a short Poisson run's own rate is a few % off; 10 % short is the server's doing
MIN_REQUESTS = 10  # fewer completions: no interior to speak of
MIN_JUDGED = 20  # fewer in the interior: its rates are stated, the delivery is not judged


def steady_rows(sched: np.ndarray, ends: np.ndarray, answering: np.ndarray) -> np.ndarray | None:
    """Which requests (arrivals `sched`, completions `ends`, s; `answering`: each one's time from its first
    token to its end) make the steady interior: arrivals after the first tenth and the first requests' answer
    time (the ramp: the batch fills over it), and before the last tenth and the last requests' answer time
    (the drain: the batch empties, the last answers come faster; a queue ahead of them drains at the server's
    pace and needs no cut); the tenths alone when that leaves too few. None: too few for an interior."""
    n = sched.size
    if n < MIN_REQUESTS:
        return None
    order = np.argsort(sched, kind="stable")
    t, answer = sched[order], answering[order]
    k = max(1, n // 10)
    lo, hi = float(t[k]), float(t[n - 1 - k])
    ramp, drain = float(np.median(answer[:k])), float(np.median(answer[-k:]))
    sel: np.ndarray = (sched >= max(lo, t[0] + ramp)) & (sched <= min(hi, t[-1] - drain))
    if int(sel.sum()) < MIN_REQUESTS:
        sel = (sched >= lo) & (sched <= hi)
    if int(sel.sum()) < 3 or float(sched[sel].max() - sched[sel].min()) <= 0:
        return None
    return sel


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
    has = c.lens[ok] > 0
    first = np.zeros(ok.size)
    first[has] = c.first_chunk(ok[has]) / 1e6
    sel = steady_rows(sched, ends, np.where(has, ends - starts - first, 0.0))
    if sel is None:
        return None
    t, lat = sched[sel], (ends - sched)[sel]
    window = float(t.max() - t.min())
    offered = (t.size - 1) / window
    # the latency's trend over the interior: a server that keeps up answers each arrival as fast as the one
    # before; one that falls behind adds (1/capacity - 1/offered) per arrival, so its completions come at
    # offered / (1 + slope) however long the run or its drain. A falling latency (a warm-up, a busy client at the
    # start) is no completion rate above the offered one: over a run a server cannot answer more than it is sent
    slope = max(0.0, float(np.polyfit(t - t.min(), lat, 1)[0]))
    achieved = offered / (1.0 + slope)
    tokens = np.clip(c.a["output_tokens"][ok][sel], 0, None)
    out: dict[str, Any] = {
        "achieved_rate": achieved,
        # the steady output rate a step's cost is priced at: the interior's tokens per request x its rate
        K.OUTPUT_THROUGHPUT: float(tokens.mean()) * achieved,
        # mean requests in flight at the server (Little's law: the achieved rate x the time each was there)
        "achieved_concurrency": achieved * float(np.mean((ends - starts)[sel])),
        "window_s": window,
        "latency_slope": slope,
        "tolerance": DELIVERY_TOLERANCE,
    }
    if open_loop:  # its schedule is the load offered
        out["offered_rate"] = offered
        out["achieved_fraction"] = achieved / offered
        if t.size >= MIN_JUDGED:  # fewer: the latency's trend is too noisy to judge (no verdict, not a pass)
            out["delivered"] = bool(achieved >= (1.0 - DELIVERY_TOLERANCE) * offered)
        if good is not None:
            out["goodput_of_offered"] = float(np.mean(good[sel])) * achieved / offered
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
