"""Every metric definition, computed from RequestRecords (see docs/metrics.md); nothing else re-derives them.

Definitions match `vllm bench serve` 0.32 so results compare: statistics in ms, population std,
percentiles by linear interpolation, TPOT request-weighted from usage token counts.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_users.record import RequestRecord

DEFAULT_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
GOODPUT_METRICS = ("ttft", "tpot", "e2el")


@dataclass(frozen=True)
class Slo:
    """A goodput objective: every named metric must be <= its limit in ms."""

    limits_ms: dict[str, float]

    @classmethod
    def parse(cls, items: Sequence[str]) -> Slo:
        """Parse vLLM-style `ttft:MS tpot:MS e2el:MS` items; raises ValueError naming the bad item."""
        limits: dict[str, float] = {}
        for item in items:
            for part in item.split():
                name, sep, value = part.partition(":")
                if not sep or name not in GOODPUT_METRICS:
                    raise ValueError(f"invalid goodput item {part!r}: expected one of ttft:MS tpot:MS e2el:MS")
                try:
                    ms = float(value)
                except ValueError:
                    raise ValueError(f"invalid goodput value in {part!r}: not a number") from None
                if not ms > 0:
                    raise ValueError(f"invalid goodput value in {part!r}: must be > 0")
                limits[name] = ms
        return cls(limits)


def tpot_s(r: RequestRecord) -> float | None:
    """(E2EL - TTFT) / (output_tokens - 1); None unless output_tokens > 1."""
    if r.error is not None or not r.chunk_times_us or not r.output_tokens or r.output_tokens <= 1:
        return None
    return (r.chunk_times_us[-1] - r.chunk_times_us[0]) / 1e6 / (r.output_tokens - 1)


def itls_s(r: RequestRecord) -> list[float]:
    """Gaps between consecutive output-carrying chunks, in seconds."""
    c = r.chunk_times_us
    return [(c[i] - c[i - 1]) / 1e6 for i in range(1, len(c))]


def stats_ms(values_s: Iterable[float] | np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    """mean/median/std (population)/pN in ms, vLLM's way (0 when there are no values)."""
    arr = np.asarray(values_s if isinstance(values_s, np.ndarray) else list(values_s), dtype=np.float64)
    if arr.size == 0:
        arr = np.zeros(1)
    ms = arr * 1000.0
    out = {"mean": float(ms.mean()), "median": float(np.median(ms)), "std": float(ms.std())}
    pct: Any = np.percentile(ms, list(percentiles)) if percentiles else []
    for p, v in zip(percentiles, pct, strict=False):
        out[f"p{_pname(p)}"] = float(v)
    return out


def _pname(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def _flat_chunks(ok: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """All chunk times of `ok` in record order, and each record's chunk count (C-level iteration: fast)."""
    lens = np.fromiter((len(r.chunk_times_us) for r in ok), dtype=np.int64, count=len(ok))
    flat = np.fromiter(itertools.chain.from_iterable([r.chunk_times_us for r in ok]), dtype=np.int64,
                       count=int(lens.sum()))  # fmt: skip
    return flat, lens


def _tpots(ok: Sequence[RequestRecord], flat: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """tpot_s of every successful request with output_tokens > 1, vectorised (same float operations)."""
    out = np.fromiter((r.output_tokens or 0 for r in ok), dtype=np.int64, count=len(ok))
    ends = np.cumsum(lens)
    keep = (out > 1) & (lens > 0)
    first, last = flat[(ends - lens)[keep]], flat[(ends - 1)[keep]]
    return (last - first) / 1e6 / (out[keep] - 1).astype(np.float64)


def _metric_arrays(ok: list[RequestRecord]) -> dict[str, np.ndarray]:
    flat, lens = _flat_chunks(ok)
    ends = np.cumsum(lens)
    ttft = flat[ends - lens].astype(np.float64) / 1e6
    e2el = flat[ends - 1].astype(np.float64) / 1e6
    tpots = _tpots(ok, flat, lens)
    n_itl = int(lens.sum()) - len(ok)
    if n_itl:
        gaps = np.diff(flat)
        firsts = np.cumsum(lens)[:-1] - 1  # gap positions that cross a record boundary
        mask = np.ones(gaps.size, dtype=bool)
        mask[firsts] = False
        itl = gaps[mask] / 1e6
    else:
        itl = np.zeros(0)
    return {"ttft": ttft, "tpot": np.asarray(tpots, dtype=np.float64), "itl": itl, "e2el": e2el}


def is_good(r: RequestRecord, slo: Slo) -> bool:
    """A successful request meets every objective of the SLO."""
    if r.error is not None or not r.chunk_times_us:
        return False
    values = {"ttft": r.chunk_times_us[0] / 1e3, "e2el": r.chunk_times_us[-1] / 1e3}
    t = tpot_s(r)
    values["tpot"] = t * 1e3 if t is not None else 0.0
    return all(values[k] <= lim for k, lim in slo.limits_ms.items())


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at any instant (exact sweep over start/end)."""
    sent = [r for r in records if r.error != "dropped"]
    if not sent:
        return 0
    starts = np.fromiter((r.t_start for r in sent), dtype=np.float64, count=len(sent))
    ends = starts + np.fromiter((r.end_us for r in sent), dtype=np.float64, count=len(sent)) / 1e6
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(len(sent)), -np.ones(len(sent))])
    order = np.lexsort((deltas, times))  # ends before starts at equal times
    return int(np.cumsum(deltas[order]).max())


def peak_output_tokens_per_s(ok: Sequence[RequestRecord]) -> float:
    """Peak output tokens in any 1-s wall-clock bucket (each request's tokens spread over its chunks)."""
    if not ok:
        return 0.0
    t0 = min(r.t_start for r in ok)
    flat, lens = _flat_chunks(ok)
    n = lens.astype(np.float64)
    out = np.fromiter(((r.output_tokens or len(r.chunk_times_us)) for r in ok), dtype=np.float64, count=len(ok))
    base = np.fromiter((r.t_start - t0 for r in ok), dtype=np.float64, count=len(ok))
    # Same float operations as the per-chunk loop, and bincount adds weights in input order: identical sums.
    buckets = (np.repeat(base, lens) + flat / 1e6).astype(np.int64)
    return float(np.bincount(buckets, weights=np.repeat(out / n, lens)).max())


def duration_s(records: Sequence[RequestRecord]) -> float:
    """First dispatch to last completion across all sent requests."""
    sent = [r for r in records if r.error != "dropped"]
    if not sent:
        return 0.0
    first = min(r.t_start for r in sent)
    last = max(r.t_start + r.end_us / 1e6 for r in sent)
    return max(last - first, 1e-9)


def compute_metrics(
    records: Sequence[RequestRecord],
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    duration: float | None = None,
) -> dict[str, Any]:
    """vLLM-named result fields for a set of records, plus our extras beside them."""
    sent = [r for r in records if r.error != "dropped"]
    ok = [r for r in sent if r.error is None and r.chunk_times_us]
    interrupted = sum(1 for r in sent if r.error == "interrupted")
    failed = len(sent) - len(ok) - interrupted
    dur = duration if duration is not None else duration_s(records)
    dur = dur or 1e-9
    total_in = sum(r.prompt_tokens or 0 for r in ok)
    total_out = sum(r.output_tokens or 0 for r in ok)
    res: dict[str, Any] = {
        "duration": dur,
        "completed": len(ok),
        "failed": failed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "request_goodput": None,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": peak_output_tokens_per_s(ok),
        "max_concurrent_requests": peak_concurrency(sent),
    }
    arrays = _metric_arrays(ok)
    for m in METRICS:
        for k, v in stats_ms(arrays[m], percentiles).items():
            res[f"{k}_{m}_ms"] = v  # vLLM's names: mean_ttft_ms, p99_itl_ms, ...
    if slo is not None:
        good = sum(1 for r in ok if is_good(r, slo))
        res["request_goodput"] = good / dur
        res["goodput"] = {
            "slo_ms": dict(slo.limits_ms),
            "good": good,
            "good_fraction": good / len(ok) if ok else 0.0,
            "per_metric_met_fraction": {
                k: (sum(1 for r in ok if is_good(r, Slo({k: v}))) / len(ok) if ok else 0.0)
                for k, v in slo.limits_ms.items()
            },
        }
    res.update(_extras(sent, ok, records, percentiles))
    res["interrupted"] = interrupted
    return res


def _extras(
    sent: Sequence[RequestRecord],
    ok: Sequence[RequestRecord],
    records: Sequence[RequestRecord],
    percentiles: Sequence[float],
) -> dict[str, Any]:
    errors = Counter(r.error for r in sent if r.error is not None and r.error != "interrupted")
    statuses = Counter(str(r.status) for r in sent if r.error == "http")
    chunks = sum(len(r.chunk_times_us) for r in ok)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    prompt = sum(r.prompt_tokens or 0 for r in ok if r.cached_tokens is not None)
    cached = sum(r.cached_tokens or 0 for r in ok if r.cached_tokens is not None)
    scheduled = [r for r in records if r.t_intended is not None]
    dropped = sum(1 for r in records if r.error == "dropped")
    extras: dict[str, Any] = {
        "errors_by_kind": dict(errors),
        "http_errors_by_status": dict(statuses),
        "chunk_token_ratio": (chunks / out_tokens) if out_tokens else None,
        "tokens_estimated_requests": sum(1 for r in ok if r.tokens_estimated),
        "prefix_cache_hit_rate": (cached / prompt) if prompt else None,
        "cached_tokens_reported": any(r.cached_tokens is not None for r in ok),
    }
    validated = [r for r in sent if r.valid is not None]
    extras["validity_rate"] = (sum(1 for r in validated if r.valid) / len(validated)) if validated else None
    requested = [r for r in ok if r.input_len is not None and r.prompt_tokens is not None]
    if requested:
        extras["input_len_requested_mean"] = float(np.mean([r.input_len for r in requested]))
        extras["input_len_actual_mean"] = float(np.mean([r.prompt_tokens for r in requested]))
    if scheduled:
        extras["arrivals"] = arrival_stats(records, percentiles)
    else:
        extras["arrivals"] = {"scheduled": 0, "sent": len(sent), "dropped": dropped}
    return extras


LATE_THRESHOLD_S = 0.010  # an arrival sent more than 10 ms after its intended time is "late"


def arrival_stats(records: Sequence[RequestRecord], percentiles: Sequence[float]) -> dict[str, Any]:
    """Open-loop schedule keeping: scheduled/sent/dropped/late, lag, latency from intended start."""
    sched = [r for r in records if r.t_intended is not None]
    sent = [r for r in sched if r.error != "dropped"]
    lag = np.asarray([r.t_start - r.t_intended for r in sent], dtype=np.float64)  # type: ignore[operator]
    ok = [r for r in sent if r.error is None and r.chunk_times_us]
    ttft_i = [r.t_start - r.t_intended + r.chunk_times_us[0] / 1e6 for r in ok]  # type: ignore[operator]
    e2el_i = [r.t_start - r.t_intended + r.chunk_times_us[-1] / 1e6 for r in ok]  # type: ignore[operator]
    return {
        "scheduled": len(sched),
        "sent": len(sent),
        "dropped": len(sched) - len(sent),
        "late": int((lag > LATE_THRESHOLD_S).sum()) if lag.size else 0,
        "late_threshold_ms": LATE_THRESHOLD_S * 1000,
        "schedule_lag_ms": stats_ms(lag, percentiles),
        "ttft_from_intended_ms": stats_ms(ttft_i, percentiles),
        "e2el_from_intended_ms": stats_ms(e2el_i, percentiles),
    }


def per_scenario(
    records: Sequence[RequestRecord], *, slo: Slo | None = None, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> dict[str, dict[str, Any]]:
    """compute_metrics for each scenario on the run's common duration."""
    dur = duration_s(records)
    names = sorted({r.scenario for r in records})
    return {
        n: compute_metrics([r for r in records if r.scenario == n], slo=slo, percentiles=percentiles, duration=dur)
        for n in names
    }


def ttft_by_turn(records: Sequence[RequestRecord], percentiles: Sequence[float] = (50, 99)) -> dict[str, Any]:
    """Multi-turn: TTFT stats and cached-token fraction by turn index."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.turn is not None and r.error is None and r.chunk_times_us:
            turns.setdefault(r.turn, []).append(r)
    out: dict[str, Any] = {}
    for t in sorted(turns):
        rs = turns[t]
        prompt = sum(r.prompt_tokens or 0 for r in rs)
        cached = sum(r.cached_tokens or 0 for r in rs)
        out[str(t)] = {
            "count": len(rs),
            "ttft_ms": stats_ms([r.chunk_times_us[0] / 1e6 for r in rs], percentiles),
            "mean_prompt_tokens": prompt / len(rs),
            "cached_fraction": cached / prompt if prompt else None,
        }
    return out


def metric_arrays(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """TTFT/TPOT/ITL/E2EL samples in seconds of the successful requests (the data behind the statistics)."""
    return _metric_arrays([r for r in records if r.error is None and r.chunk_times_us])


def timeseries(records: Sequence[RequestRecord], bucket_s: float = 1.0) -> dict[str, Any]:
    """Per time bucket since the first dispatch: completions/s, failures/s, output tok/s (by completion),
    in-flight requests (at the bucket's middle) and TTFT p50/p99 (by first-token time)."""
    sent = [r for r in records if r.error != "dropped"]
    if not sent:
        return {"t0": None, "bucket_s": bucket_s, "t": []}
    starts = np.fromiter((r.t_start for r in sent), dtype=np.float64, count=len(sent))
    ends = starts + np.fromiter((r.end_us for r in sent), dtype=np.float64, count=len(sent)) / 1e6
    ok = np.fromiter((r.error is None and bool(r.chunk_times_us) for r in sent), dtype=bool, count=len(sent))
    out_tok = np.fromiter((r.output_tokens or 0 for r in sent), dtype=np.float64, count=len(sent))
    ttft = np.fromiter((r.chunk_times_us[0] if r.chunk_times_us else 0 for r in sent), dtype=np.float64,
                       count=len(sent)) / 1e6  # fmt: skip
    return _timeseries(starts, ends, ok, out_tok, ttft, bucket_s)


def _timeseries(starts: np.ndarray, ends: np.ndarray, ok: np.ndarray, out_tok: np.ndarray, ttft: np.ndarray,
                bucket_s: float) -> dict[str, Any]:  # fmt: skip
    t0 = float(starts.min())
    nb = int((ends.max() - t0) // bucket_s) + 1
    end_b = ((ends - t0) // bucket_s).astype(np.int64)
    completed = np.bincount(end_b[ok], minlength=nb) / bucket_s
    failed = np.bincount(end_b[~ok], minlength=nb) / bucket_s
    tokens = np.bincount(end_b[ok], weights=out_tok[ok], minlength=nb) / bucket_s
    mids = t0 + (np.arange(nb) + 0.5) * bucket_s
    inflight = np.searchsorted(np.sort(starts), mids, "right") - np.searchsorted(np.sort(ends), mids, "right")
    first_b = ((starts[ok] + ttft[ok] - t0) // bucket_s).astype(np.int64)
    order = np.argsort(first_b, kind="stable")
    groups = np.split(ttft[ok][order] * 1000.0, np.flatnonzero(np.diff(first_b[order])) + 1)
    p50 = np.full(nb, np.nan)
    p99 = np.full(nb, np.nan)
    keys = np.unique(first_b)  # sorted, one per non-empty group, in the groups' order
    for k, g in zip(keys, groups, strict=False):
        if g.size and 0 <= k < nb:
            p50[k], p99[k] = np.percentile(g, [50, 99])
    return {
        "t0": t0,
        "bucket_s": bucket_s,
        "t": (np.arange(nb) * bucket_s).tolist(),
        "completed_per_s": completed.tolist(),
        "failed_per_s": failed.tolist(),
        "output_tokens_per_s": tokens.tolist(),
        "inflight": inflight.astype(np.int64).tolist(),
        "ttft_p50_ms": p50.tolist(),
        "ttft_p99_ms": p99.tolist(),
    }
