"""The statistics a rule tests, computed from a run's samples, and their bootstrap.

Each statistic has the result's definition (vllm_users.measure.metrics: percentiles by linear interpolation,
population std, TPOT of successes with more than one output token, ITL pooled over every gap of every
success, throughput = total / duration), so its value on a whole run is the run's own figure.

Its noise comes from a circular block bootstrap (Politis and Romano, 1992): resample blocks of consecutive
requests (in start order), or of consecutive time buckets for the throughputs. Requests that run together
share the server's batch and queue, so their latencies are correlated; blocks at least as long as the run's
mean concurrency keep that correlation inside each block, and an interval from independent per-request
resampling would be too narrow. `resample` returns the B resampled values less the value they were drawn
from, so a caller adds them to a point estimate (a percentile interval of the statistic).

A resample is held as counts, how often it drew each request (a +1/-1 at each block's ends, summed), so a
percentile is a search in cumulative counts over the values sorted once, and a ratio or a rate a product:
no index array and no sort per resample.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from orchestration.gate.samples import FAILED, INTERRUPTED, OK, RunSamples
from vllm_users.measure import metric_keys as K

__all__ = [
    "MIN_SAMPLES",
    "Statistic",
    "block_counts",
    "block_length",
    "counts_of_blocks",
    "statistic_for",
    "weighted",
]

MIN_SAMPLES = 20  # fewer samples (or time buckets) on a side: no interval
# requests a side's bootstrap draws from; above, random whole blocks of them: the interval is then wider than the
# run's samples allow (at 10 000 requests a median's is already a fraction of a percent), never narrower
MAX_UNITS = 10_000
MAX_VALUES = 100_000  # the same for the values they hold (ITL: every gap of every request)
_CELLS = (
    500_000  # resamples x values computed at once: a few arrays of this many stay in the cache (2-3x faster)
)
LATENCY = ("ttft", "tpot", "e2el")


def _stat_ok(stat: str) -> bool:
    """`mean`, `median`, `std` and `pN` (0 < N < 100) have a bootstrap; a maximum has none worth the name."""
    if stat in ("mean", "median", "std"):
        return True
    try:
        return stat.startswith("p") and 0.0 < float(stat[1:]) < 100.0
    except ValueError:
        return False


def weighted(stat: str, values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`stat` of each row's multiset: sorted `values` taken w[row, i] times each (numpy's definitions: population
    std, percentiles by linear interpolation). One pass of counts instead of a sort per resample."""
    total = w.sum(axis=1).astype(np.float64)
    empty = (
        total == 0
    )  # a row that drew no value (ITL: only requests without a gap): NaN, left out by the caller
    if empty.any():
        return np.where(empty, np.nan, weighted(stat, values, np.where(empty[:, None], 1, w)))
    if stat in ("mean", "std"):
        c = values - values.mean()  # centred: the variance loses no digits to the mean
        m1 = (w @ c) / total
        if stat == "mean":
            return m1 + values.mean()
        return np.sqrt(np.maximum((w @ (c * c)) / total - m1 * m1, 0.0))
    q = 50.0 if stat == "median" else float(stat[1:])
    pos = (total - 1.0) * (q / 100.0)
    lo = np.floor(pos)
    cum: np.ndarray = np.cumsum(
        w, axis=1, dtype=np.int32 if w.dtype == np.int32 else np.int64
    )  # ints: 10x floats
    rows, m = w.shape
    step = int(cum[:, -1].max()) + 1  # rows shifted apart: one sorted array, one searchsorted
    shift = np.arange(rows, dtype=np.int64) * step
    flat = (cum + shift[:, None]).ravel()
    first = np.arange(rows) * m

    def kth(k: np.ndarray) -> np.ndarray:  # the value of 0-based rank k in each row
        return values[np.searchsorted(flat, k.astype(np.int64) + shift, side="right") - first]

    a, b = kth(lo), kth(np.minimum(lo + 1.0, total - 1.0))
    return a + (b - a) * (pos - lo)


def block_length(n: int, concurrency: float = 1.0) -> int:
    """Block length for `n` ordered values: n^(1/3) (the usual rate), at least the mean concurrency, and short
    enough for ten blocks."""
    return int(max(1, min(max(math.ceil(n ** (1 / 3)), round(concurrency)), n // 10)))


def block_counts(n: int, length: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` circular block-bootstrap resamples of `n` ordered units, as how often each unit is drawn: a
    (count, n) int32 array. Blocks start anywhere and wrap around the end; the last block is cut at n draws."""
    return counts_of_blocks(rng.integers(0, n, size=(count, -(-n // length))), n, length)


def counts_of_blocks(starts: np.ndarray, n: int, length: int) -> np.ndarray:
    """The draws of each unit when block i of each row starts at starts[row, i] (every block `length` long but
    the last, which ends the resample at n draws): a +1/-1 at each block's ends, summed up. No index per draw."""
    rows, k = starts.shape
    lens = np.full(k, length)
    lens[-1] = n - (k - 1) * length
    end = starts + lens
    base = (np.arange(rows) * (n + 1))[:, None]
    wrap = end > n  # a block past the end goes on at 0
    size = rows * (n + 1)
    ups = np.bincount(np.concatenate([(starts + base).ravel(), base.repeat(k, axis=1)[wrap]]), minlength=size)
    downs = np.bincount(
        np.concatenate([(np.minimum(end, n) + base).ravel(), (end - n + base)[wrap]]), minlength=size
    )
    edges = (ups - downs).astype(np.int32).reshape(rows, n + 1)
    # integers, contiguous rows: a float or strided cumsum is 4-10x slower; column n (the last block's end) is cut
    return np.cumsum(edges, axis=1, dtype=np.int32)[:, :n]


def _subsample(n: int, length: int, cap: int, rng: np.random.Generator) -> np.ndarray | None:
    """Indices of random whole blocks holding about `cap` of `n` ordered units (in order); None when n <= cap."""
    if n <= cap:
        return None
    blocks = np.sort(rng.choice(n // length, size=max(1, cap // length), replace=False))
    return (blocks[:, None] * length + np.arange(length)).ravel()


def _draw(
    n: int, length: int, b: int, rng: np.random.Generator, width: int, fn: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """fn(counts) over `b` block resamples of `n` units, a few at a time (`width`: cells per resample)."""
    per = max(1, _CELLS // max(width, n, 1))
    return np.concatenate([fn(block_counts(n, length, min(per, b - s), rng)) for s in range(0, b, per)])


@dataclass(frozen=True)
class Statistic:
    """One rule's statistic: its value on a run and its bootstrap there."""

    name: str
    kind: str  # "latency" | "itl" | "ratio" | "rate"

    def point(self, run: RunSamples) -> float | None:
        """The statistic on the whole run (the run's figure); None without samples."""
        if self.kind == "rate":
            return _rate_total(self.name, run) / run.duration if _has_rate(self.name, run) else None
        if self.kind == "ratio":
            num, den = _ratio_parts(self.name, run)
            return float(num.sum() / den.sum()) if den.sum() > 0 else None
        values = _pooled(self.kind, self.name, run)[0]
        if not values.size:
            return None
        stat = self.name.split("_", 1)[0]
        if stat in ("mean", "std"):
            v = float(values.mean() if stat == "mean" else values.std())
        else:
            v = float(np.percentile(values, 50.0 if stat == "median" else float(stat[1:])))
        return v * 1000.0  # ms, as the result

    def size(self, run: RunSamples) -> int:
        """How many units (requests, or time buckets for a rate) the bootstrap resamples."""
        if self.kind == "rate":
            return _buckets(run) if _has_rate(self.name, run) else 0
        if self.kind == "ratio":
            return int(_ratio_parts(self.name, run)[1].size)
        return int(_pooled(self.kind, self.name, run)[2])

    def resample(self, run: RunSamples, b: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
        """`b` bootstrap values of the statistic less the value they were resampled from, and how (one line)."""
        if self.kind == "rate":
            sums = _bucket_sums(self.name, run)
            k, length = sums.size, block_length(sums.size)
            # a resample's statistic is its total over the run's duration: the buckets tile the duration
            out = _draw(k, length, b, rng, k, lambda c: c @ sums) / run.duration
            how = f"{k} time buckets of {run.duration / k:.3g} s, blocks of {length}"
            return out - sums.sum() / run.duration, how
        if self.kind == "ratio":
            num, den = _ratio_parts(self.name, run)
            n = num.size
            length = block_length(n, run.concurrency)
            sub = _subsample(n, length, MAX_UNITS, rng)
            num, den = (num, den) if sub is None else (num[sub], den[sub])

            def ratio(c: np.ndarray) -> np.ndarray:
                d = c @ den
                return np.divide(c @ num, d, out=np.zeros(d.shape), where=d > 0)

            base = ratio(np.ones((1, num.size), np.int64))[0]
            return _draw(num.size, length, b, rng, num.size, ratio) - base, _how(n, length, sub)
        values, owner, n = _pooled(self.kind, self.name, run)
        length = block_length(n, run.concurrency)
        sub = _subsample(n, length, min(MAX_UNITS, int(MAX_VALUES * n / max(values.size, 1))), rng)
        if sub is not None:  # keep the values of the drawn requests, renumbered 0..len(sub)-1
            where = np.full(n, -1)
            where[sub] = np.arange(sub.size)
            keep = where[owner] >= 0
            values, owner = values[keep], where[owner[keep]]
        order = np.argsort(values, kind="stable")
        sorted_values, sorted_owner = values[order], owner[order]
        units = n if sub is None else sub.size
        stat = self.name.split("_", 1)[0]

        def reduce(c: np.ndarray) -> np.ndarray:  # a request's draws count each of its values
            return weighted(stat, sorted_values, c[:, sorted_owner])

        base = reduce(np.ones((1, units), np.int32))[0]
        out = _draw(units, length, b, rng, values.size, reduce)
        return (out - base) * 1000.0, _how(n, length, sub)


def _how(n: int, length: int, sub: np.ndarray | None) -> str:
    """'200 requests, blocks of 8' (or 'a subsample of 50000 of 1000000 requests, ...')."""
    drawn = f"{n} requests" if sub is None else f"a subsample of {sub.size} of {n} requests"
    return f"{drawn}, blocks of {length}"


def _pooled(kind: str, name: str, run: RunSamples) -> tuple[np.ndarray, np.ndarray, int]:
    """The values a latency statistic is taken over (s), the request (0..n-1) each belongs to, and n: one value
    per success for TTFT/TPOT/E2EL, every gap of every success for ITL."""
    if kind == "itl":
        gaps, per_req = _itl(run)
        return gaps, np.repeat(np.arange(per_req.size), per_req), int(per_req.size)
    values = _latency(name, run)
    return values, np.arange(values.size), int(values.size)


def statistic_for(name: str) -> Statistic | None:
    """The statistic behind metric `name` when the samples define it; None for figures with no samples."""
    if name in (K.REQUEST_THROUGHPUT, K.OUTPUT_THROUGHPUT, K.TOTAL_TOKEN_THROUGHPUT, K.REQUEST_GOODPUT):
        return Statistic(name, "rate")
    if name in ("error_rate", K.VALIDITY_RATE, K.PREFIX_CACHE_HIT_RATE, K.CHUNK_TOKEN_RATIO):
        return Statistic(name, "ratio")
    stat, _, rest = name.partition("_")
    metric = rest.removesuffix("_ms")
    if not rest.endswith("_ms") or not _stat_ok(stat):
        return None
    if metric == "itl":
        return Statistic(name, "itl")
    return Statistic(name, "latency") if metric in LATENCY else None


# ------------------------------------------------------------------------------------- per-request values
def _latency(name: str, run: RunSamples) -> np.ndarray:
    """TTFT, TPOT or E2EL (s) of the successes, in start order (TPOT: those with more than one output token)."""
    metric = name.split("_", 1)[1].removesuffix("_ms")
    ok = run.ok
    first = run.chunks[run.first_chunk[ok]] if ok.size else np.zeros(0, np.int64)
    last = run.chunks[run.first_chunk[ok] + run.lens[ok] - 1] if ok.size else np.zeros(0, np.int64)
    if metric == "ttft":
        return first / 1e6
    if metric == "e2el":
        return last / 1e6
    out = run.out_tok[ok]
    keep = out > 1
    return np.asarray((last[keep] - first[keep]) / 1e6 / (out[keep] - 1), dtype=np.float64)


def _itl(run: RunSamples) -> tuple[np.ndarray, np.ndarray]:
    """Every gap between consecutive chunks of each success (s, pooled in start order), and gaps per success."""
    lens = run.lens[run.ok]
    if not lens.size:
        return np.zeros(0), np.zeros(0, np.int64)
    gaps = np.diff(run.chunks)  # the successes' chunks, in order (other requests keep none)
    keep = np.ones(gaps.size, dtype=bool)
    keep[np.cumsum(lens)[:-1] - 1] = False  # no gap across two requests
    return gaps[keep] / 1e6, lens - 1


def _ratio_parts(name: str, run: RunSamples) -> tuple[np.ndarray, np.ndarray]:
    """Numerator and denominator per request of a ratio of sums (compute_metrics' definitions)."""
    if name == "error_rate":  # failed / (completed + failed); interrupted requests are neither
        rows = run.outcome != INTERRUPTED
        return (run.outcome[rows] == FAILED).astype(np.float64), np.ones(int(rows.sum()))
    if name == K.VALIDITY_RATE:
        rows = run.valid != -1
        return (run.valid[rows] == 1).astype(np.float64), np.ones(int(rows.sum()))
    ok = run.outcome == OK
    if name == K.PREFIX_CACHE_HIT_RATE:
        rows = ok & (run.cached != -1)
        return np.maximum(run.cached[rows], 0).astype(np.float64), np.maximum(run.in_tok[rows], 0).astype(
            np.float64
        )
    # chunk_token_ratio: chunks / output tokens of the successes
    return run.lens[ok].astype(np.float64), np.maximum(run.out_tok[ok], 0).astype(np.float64)


# ------------------------------------------------------------------------------------- throughput buckets
def _has_rate(name: str, run: RunSamples) -> bool:
    """A run has the rate: it sent requests (and, for goodput, had an SLO)."""
    return run.n > 0 and (name != K.REQUEST_GOODPUT or bool((run.good != -1).any()))


def _buckets(run: RunSamples) -> int:
    """About 1-s buckets over the run's duration, between 20 and 400 of them."""
    return int(min(400, max(20, round(run.duration))))


def _rate_total(name: str, run: RunSamples) -> float:
    return float(_bucket_sums(name, run).sum())


def _bucket_sums(name: str, run: RunSamples) -> np.ndarray:
    """What the rate counts, summed in each time bucket: requests and prompt tokens when a success ends,
    output tokens spread over its chunks (as max_output_tokens_per_s spreads them)."""
    k = _buckets(run)
    ok = run.ok
    t0 = float(run.start.min()) if run.n else 0.0
    width = run.duration / k

    def at(times: np.ndarray, weights: np.ndarray) -> np.ndarray:
        b = np.clip(((times - t0) / width).astype(np.int64), 0, k - 1)
        return np.bincount(b, weights=weights, minlength=k)

    ends = run.end[ok]
    if name == K.REQUEST_THROUGHPUT:
        return at(ends, np.ones(ok.size))
    if name == K.REQUEST_GOODPUT:
        return at(ends, (run.good[ok] == 1).astype(np.float64))
    lens = run.lens[ok]
    per_chunk = np.repeat(np.maximum(run.out_tok[ok], 0) / np.maximum(lens, 1), lens)
    chunk_times = np.repeat(run.start[ok], lens) + run.chunks / 1e6  # only the successes keep chunks
    out = at(chunk_times, per_chunk)
    if name == K.TOTAL_TOKEN_THROUGHPUT:
        out += at(ends, np.maximum(run.in_tok[ok], 0).astype(np.float64))
    return out
