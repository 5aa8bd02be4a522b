"""Every metric definition (docs/metrics.md), computed vectorised on a run's columns; nothing else re-derives them.

Definitions match `vllm bench serve` 0.32 so results compare: statistics in ms, population std,
percentiles by linear interpolation, TPOT request-weighted from usage token counts. This module holds the
per-request definitions (which requests count, the TTFT/TPOT/ITL/E2EL samples, duration, peaks, SLOs)
and the statistics; `vllm_users.measure.result_fields` assembles them into the result fields.

Functions take the run's `Columns` or a list of `RequestRecord`s (packed once with `columns_from_records`),
and `idx`, the rows to use (default: all). `tpot_s` is the one per-record function (workers use it live).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_users.measure.columns import Columns, Records, as_columns
from vllm_users.measure.metric_keys import LATENCIES, percentile_name, stat_key
from vllm_users.measure.record import POOLING_ENDPOINTS, RequestRecord

DEFAULT_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)  # our own distributions (arrivals, histograms)
METRICS = tuple(m.name for m in LATENCIES)  # ("ttft", "tpot", "itl", "e2el")
# `vllm bench serve`'s --percentile-metrics and --metric-percentiles and their defaults (generative models)
DEFAULT_PERCENTILE_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl")
DEFAULT_METRIC_PERCENTILES: tuple[float, ...] = (99.0,)
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
LATE_THRESHOLD_S = 0.010  # an arrival sent more than 10 ms after its intended time is "late"
# ITL pools every gap of every request (1 M x 128 -> 127 M samples): above this many, statistics come from
# exact integer-µs counts (np.bincount) instead of a float sort; same values up to float rounding.
ITL_COUNT_THRESHOLD = 2_000_000
_MAX_COUNT_BINS = 1 << 27  # gaps up to ~134 s use counts; larger gaps fall back to sorting


@dataclass(frozen=True)
class Slo:
    """A goodput objective: every named metric must be <= its limit in ms; with `require_valid` (the word `valid`:
    a wrong answer is not good however fast) the answer must also not be marked invalid (rec.valid False: json/tools scenarios, a `check` hook)."""

    limits_ms: dict[str, float]
    require_valid: bool = False

    @classmethod
    def parse(cls, items: Sequence[str]) -> Slo:
        """Parse vLLM-style `ttft:MS tpot:MS e2el:MS [valid]` items; raises ValueError naming the bad item."""
        limits: dict[str, float] = {}
        valid = False
        for item in items:
            for part in item.split():
                if part == "valid":
                    valid = True
                    continue
                name, sep, value = part.partition(":")
                if not sep or name not in GOODPUT_METRICS:
                    raise ValueError(
                        f"invalid goodput item {part!r}: expected one of ttft:MS tpot:MS e2el:MS valid"
                    )
                try:
                    ms = float(value)
                except ValueError:
                    raise ValueError(f"invalid goodput value in {part!r}: not a number") from None
                if not ms > 0:
                    raise ValueError(f"invalid goodput value in {part!r}: must be > 0")
                limits[name] = ms
        return cls(limits, valid)

    def met_by(self, r: RequestRecord) -> bool:
        """One successful record meets every objective (as slo_met: an undefined TPOT counts as 0)."""
        if r.error is not None or not r.chunk_times_us or (self.require_valid and r.valid is False):
            return False
        values = {
            "ttft": r.chunk_times_us[0] / 1e3,
            "tpot": (tpot_s(r) or 0.0) * 1e3,
            "e2el": r.chunk_times_us[-1] / 1e3,
        }
        return all(values[k] <= lim for k, lim in self.limits_ms.items())


@dataclass(frozen=True)
class PercentileChoice:
    """Which `p{N}_{metric}_ms` fields a result carries (vLLM's --percentile-metrics, --metric-percentiles)."""

    metrics: tuple[str, ...] = DEFAULT_PERCENTILE_METRICS
    percentiles: tuple[float, ...] = DEFAULT_METRIC_PERCENTILES

    @classmethod
    def parse(cls, metrics: str | None, percentiles: str | None) -> PercentileChoice:
        """Parse the comma lists (None or empty: vLLM's defaults); raises ValueError naming the bad item."""
        return cls(parse_percentile_metrics(metrics), parse_metric_percentiles(percentiles))

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> PercentileChoice:
        """The choice a run recorded in its meta (runs from before these flags: the defaults)."""
        return cls.parse(meta.get("percentile_metrics"), meta.get("metric_percentiles"))


def parse_percentile_metrics(text: str | None) -> tuple[str, ...]:
    """`ttft,tpot,itl,e2el` -> the metric names, in the given order; empty -> vLLM's default."""
    if not text or not text.strip():
        return DEFAULT_PERCENTILE_METRICS
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [n for n in names if n not in METRICS]
    if bad or not names:
        raise ValueError(f"--percentile-metrics {text!r}: expected a comma list of {','.join(METRICS)}")
    return names


def parse_metric_percentiles(text: str | None) -> tuple[float, ...]:
    """`50,90,99,99.9` -> the percentiles (each in (0, 100]); empty -> vLLM's default (99)."""
    if not text or not text.strip():
        return DEFAULT_METRIC_PERCENTILES
    out: list[float] = []
    for item in text.split(","):
        try:
            p = float(item)
        except ValueError:
            raise ValueError(f"--metric-percentiles {text!r}: {item.strip()!r} is not a number") from None
        if not 0 < p <= 100:
            raise ValueError(f"--metric-percentiles {text!r}: {item.strip()!r} is not in (0, 100]")
        out.append(p)
    return tuple(dict.fromkeys(out))


# ------------------------------------------------------------------------------------- which requests count
def rows(c: Columns, idx: np.ndarray | None = None) -> np.ndarray:
    """`idx`, or every row of `c` when it is None."""
    return np.arange(c.n, dtype=np.int64) if idx is None else idx


def sent_rows(c: Columns, idx: np.ndarray) -> np.ndarray:
    """The rows of `idx` that were sent (not dropped by the open-loop scheduler)."""
    return idx[c.a["error"][idx] != c.code("error", "dropped")]


def ok_rows(c: Columns, idx: np.ndarray) -> np.ndarray:
    """The successes among `idx`: no error and at least one output chunk."""
    return idx[(c.a["error"][idx] == c.code("error", None)) & (c.lens[idx] > 0)]


def streamed_rows(c: Columns, ok: np.ndarray) -> np.ndarray:
    """The rows of `ok` that were streamed (a non-streamed answer has an E2EL, no TTFT/ITL/TPOT)."""
    ns = c.a["not_streamed"][ok]
    return ok[~ns] if ns.any() else ok


def or_zero(a: np.ndarray) -> np.ndarray:
    """`value or 0` of a column that stores None as -1."""
    return np.maximum(a, 0)


def request_spans(c: Columns, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """When each request of `idx` was dispatched and when its response ended (epoch s)."""
    starts = c.a["t_start"][idx]
    return starts, starts + c.a["end_us"][idx].astype(np.float64) / 1e6


# ----------------------------------------------------------------------------------- per-request samples
def tpot_from(first_us: Any, last_us: Any, output_tokens: Any) -> Any:
    """TPOT in s, vLLM bench's: (last chunk - first chunk) / (output_tokens - 1); scalars or arrays."""
    return (last_us - first_us) / 1e6 / (output_tokens - 1)


def tpot_s(r: RequestRecord) -> float | None:
    """TPOT of one record; None unless it succeeded with output_tokens > 1 over two chunk times at least (one
    chunk, or a stream delivered at once, which keeps one: no time between tokens was measured)."""
    if r.error is not None or len(r.chunk_times_us) < 2 or not r.output_tokens or r.output_tokens <= 1:
        return None
    return float(tpot_from(r.chunk_times_us[0], r.chunk_times_us[-1], r.output_tokens))


def tpots(c: Columns, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TPOT (s) of the successes `ok` with output_tokens > 1 and two chunk times at least, and that mask over
    `ok`."""
    out = c.a["output_tokens"][ok]
    keep = (out > 1) & (c.lens[ok] > 1)
    k = ok[keep]
    return np.asarray(tpot_from(c.first_chunk(k), c.last_chunk(k), out[keep]), dtype=np.float64), keep


def ok_chunks(c: Columns, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flat chunk times of rows `ok` (in order) and their lengths; no copy when they hold every chunk."""
    lens = c.lens[ok]
    if int(lens.sum()) == c.chunks.size:
        return c.chunks, lens
    mask = np.zeros(c.n, dtype=bool)
    mask[ok] = True
    return c.chunks[np.repeat(mask, c.lens)], lens


def _itl_us(flat: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Every gap between consecutive chunks of one request (µs), in row order; no gap across requests."""
    if flat.size - lens.size <= 0:
        return np.zeros(0, dtype=np.int64)
    gaps = np.diff(flat)
    mask = np.ones(gaps.size, dtype=bool)
    mask[np.cumsum(lens)[:-1] - 1] = False
    return gaps[mask]


def _samples(c: Columns, ok: np.ndarray) -> dict[str, np.ndarray]:
    """TTFT/TPOT/E2EL samples (s) of the successes `ok` (TTFT and TPOT of the streamed ones only)."""
    st = streamed_rows(c, ok)
    return {
        "ttft": c.first_chunk(st).astype(np.float64) / 1e6,
        "tpot": tpots(c, st)[0],
        "e2el": c.last_chunk(ok).astype(np.float64) / 1e6,
    }


def reasoning_samples(c: Columns, ok: np.ndarray) -> dict[str, np.ndarray]:
    """TTFA, reasoning TPOT and answer TPOT samples (s) of the successes `ok` that streamed reasoning first.

    TTFA = first answer chunk; reasoning TPOT = (TTFA - TTFT) / reasoning_tokens; answer TPOT =
    (E2EL - TTFA) / (answer_tokens - 1), answer_tokens = output_tokens - reasoning_tokens (docs/metrics.md)."""
    st = streamed_rows(c, ok)
    k = st[c.a["answer_us"][st] != -1]
    ttfa = c.a["answer_us"][k].astype(np.float64)
    r = c.a["reasoning_tokens"][k]
    ans = c.a["output_tokens"][k] - r
    rk, ak = r > 0, ans > 1
    return {
        "ttfa": ttfa / 1e6,
        "reasoning_tpot": (ttfa[rk] - c.first_chunk(k[rk])) / 1e6 / r[rk],
        "answer_tpot": (c.last_chunk(k[ak]) - ttfa[ak]) / 1e6 / (ans[ak] - 1),
    }


def metric_arrays(records: Records, idx: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """TTFT/TPOT/ITL/E2EL samples in seconds of the successful requests (the data behind the statistics)."""
    c = as_columns(records)
    ok = ok_rows(c, rows(c, idx))
    samples = {**_samples(c, ok), "itl": _itl_us(*ok_chunks(c, streamed_rows(c, ok))) / 1e6}
    return {m: samples[m] for m in METRICS}


def plot_arrays(records: Records, max_sample: int, seed: int = 0) -> dict[str, np.ndarray]:
    """metric_arrays for plots: ITL as the very subsample `plots.cdf_points` would draw (no 1 GB float array)."""
    c = as_columns(records)
    ok = ok_rows(c, rows(c))
    flat, lens = ok_chunks(c, streamed_rows(c, ok))
    n_itl = flat.size - lens.size
    out = _samples(c, ok)
    if n_itl > max_sample:
        pick = np.random.default_rng(seed).integers(0, n_itl, max_sample)
        # gap j (cross-record gaps removed) sits at diff position j + (records ended before it)
        ends = np.cumsum(lens)
        first_gap = ends - lens - np.arange(lens.size)  # index of each record's first gap among kept gaps
        rec = np.searchsorted(first_gap, pick, side="right") - 1
        pos = pick + rec  # position in np.diff(flat)
        out["itl"] = (flat[pos + 1] - flat[pos]) / 1e6
    else:
        out["itl"] = _itl_us(flat, lens) / 1e6
    return out


def slo_met(c: Columns, ok: np.ndarray, slo: Slo) -> dict[str, np.ndarray]:
    """For each objective of `slo`, which successes `ok` meet it (an undefined TPOT counts as 0)."""
    tp, keep = tpots(c, ok)
    tpot_ms = np.zeros(ok.size)
    tpot_ms[keep] = tp * 1e3
    values = {"ttft": c.first_chunk(ok) / 1e3, "tpot": tpot_ms, "e2el": c.last_chunk(ok) / 1e3}
    return {k: values[k] <= lim for k, lim in slo.limits_ms.items()}


# ------------------------------------------------------------------------------------------- statistics
def stats_ms(values_s: Sequence[float] | np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    """mean/median/std (population)/max/pN in ms, vLLM's way (0 when there are no values)."""
    arr = np.asarray(values_s, dtype=np.float64)
    if arr.size == 0:
        arr = np.zeros(1)
    ms = arr * 1000.0
    out = {
        "mean": float(ms.mean()),
        "median": float(np.median(ms)),
        "std": float(ms.std()),
        "max": float(ms.max()),
    }
    pct: Any = np.percentile(ms, list(percentiles)) if percentiles else []
    for p, v in zip(percentiles, pct, strict=False):
        out[percentile_name(p)] = float(v)
    return out


def _lerp(a: float, b: float, t: float) -> float:
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t  # numpy's _lerp


def _stats_from_counts(
    values_ms: np.ndarray, counts: np.ndarray, percentiles: Sequence[float]
) -> dict[str, float]:
    """stats_ms of a multiset given as sorted distinct values and their counts (numpy's definitions)."""
    n = int(counts.sum())
    if n == 0:
        return stats_ms(np.zeros(0), percentiles)
    cum = np.cumsum(counts)

    def kth(k: int) -> float:
        return float(values_ms[int(np.searchsorted(cum, k, side="right"))])

    w = counts.astype(np.float64)
    mean = float((values_ms * w).sum() / n)
    std = float(math.sqrt(float((((values_ms - mean) ** 2) * w).sum()) / n))
    median = kth((n - 1) // 2) if n % 2 else (kth(n // 2 - 1) + kth(n // 2)) / 2
    out = {"mean": mean, "median": median, "std": std, "max": float(values_ms[-1])}
    for p in percentiles:
        v = (n - 1) * (float(p) / 100.0)
        lo = math.floor(v)
        out[percentile_name(p)] = kth(n - 1) if lo >= n - 1 else _lerp(kth(lo), kth(lo + 1), v - lo)
    return out


def itl_stats(
    flat: np.ndarray, lens: np.ndarray, percentiles: Sequence[float], block: int = 1 << 20
) -> dict[str, float]:
    """stats_ms of the pooled ITL of chunks `flat` (per-request `lens`); exact counts when the pool is large."""
    n_itl = flat.size - lens.size
    if n_itl > ITL_COUNT_THRESHOLD:
        ends = np.cumsum(lens)
        span = int((flat[ends - 1] - flat[ends - lens]).max())  # no in-record gap is larger (monotone chunks)
        if span < _MAX_COUNT_BINS:
            bounds = ends[:-1] - 1  # gap positions that cross a record boundary
            counts = np.zeros(span + 1, dtype=np.int64)
            buf = np.empty(min(block, flat.size - 1), dtype=np.int64)
            try:
                for s in range(0, flat.size - 1, block):  # blocks: temporaries stay in cache, no 1 GB arrays
                    e = min(s + block, flat.size - 1)
                    g = buf[: e - s]
                    np.subtract(flat[s + 1 : e + 1], flat[s:e], out=g, casting="unsafe")
                    g[bounds[np.searchsorted(bounds, s) : np.searchsorted(bounds, e)] - s] = 0
                    part = np.bincount(g, minlength=counts.size)
                    if part.size > counts.size:
                        raise ValueError("gap larger than the record span")
                    counts += part
            except ValueError:  # a negative gap (non-monotone chunk times): sort instead
                pass
            else:
                counts[0] -= bounds.size
                vals = np.flatnonzero(counts)
                return _stats_from_counts(vals / 1e6 * 1000.0, counts[vals], percentiles)
    return stats_ms(_itl_us(flat, lens) / 1e6, percentiles)


def latency_stats(c: Columns, ok: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    """`{stat}_{metric}_ms` (vLLM's names: mean_ttft_ms, p99_itl_ms, ...) of the successes `ok`."""
    samples = _samples(c, ok)
    res: dict[str, float] = {}
    for m in METRICS:
        if m == "itl":
            st = itl_stats(*ok_chunks(c, streamed_rows(c, ok)), percentiles)
        else:
            st = stats_ms(samples[m], percentiles)
        for k, v in st.items():
            res[stat_key(k, m)] = v
    return res


# ------------------------------------------------------------------------------------ duration and peaks
def duration_s(records: Records, idx: np.ndarray | None = None) -> float:
    """First dispatch to last completion across all sent requests."""
    c = as_columns(records)
    starts, ends = request_spans(c, sent_rows(c, rows(c, idx)))
    return max(float(ends.max()) - float(starts.min()), 1e-9) if starts.size else 0.0


def peak_concurrency(records: Records, idx: np.ndarray | None = None) -> int:
    """Most sent requests in flight at any instant (exact sweep over start/end)."""
    c = as_columns(records)
    starts, ends = request_spans(c, sent_rows(c, rows(c, idx)))
    if not starts.size:
        return 0
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(starts.size), -np.ones(starts.size)])
    order = np.lexsort((deltas, times))  # ends before starts at equal times
    return int(np.cumsum(deltas[order]).max())


def peak_output_tokens_per_s(records: Records, idx: np.ndarray | None = None, block: int = 1 << 13) -> float:
    """Peak output tokens of the successes in any 1-s wall-clock bucket since the first of them started
    (each request's output tokens, or chunk count when usage is missing, spread evenly over its chunks)."""
    c = as_columns(records)
    ok = ok_rows(c, rows(c, idx))
    if not ok.size:
        return 0.0
    ts = c.a["t_start"][ok]
    base = ts - ts.min()
    lens = c.lens[ok]
    tok = c.a["output_tokens"][ok]
    w = np.where(tok > 0, tok, lens).astype(np.float64) / lens.astype(np.float64)
    pooled = np.isin(c.a["endpoint"][ok], [c.code("endpoint", e) for e in POOLING_ENDPOINTS])
    if (
        pooled.any()
    ):  # a pooling answer (embeddings/rerank/score) generates nothing: its one "chunk" (its end) weighs 0
        w[pooled] = 0.0
    flat, _ = ok_chunks(c, ok)
    ends = np.cumsum(lens)
    total: Any = np.zeros(0)
    for b0 in range(0, ok.size, block):  # blocks keep the per-chunk temporaries in cache
        b1 = min(b0 + block, ok.size)
        lo, hi = int(ends[b0] - lens[b0]), int(ends[b1 - 1])
        bl = lens[b0:b1]
        x = np.repeat(base[b0:b1], bl)
        x += flat[lo:hi] / 1e6
        part: Any = np.bincount(x.astype(np.int64), weights=np.repeat(w[b0:b1], bl))
        if part.size > total.size:
            part[: total.size] += total
            total = part
        else:
            total[: part.size] += part
    return float(total.max())
