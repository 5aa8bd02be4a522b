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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from orchestration.gate.samples import FAILED, INTERRUPTED, OK, RunSamples

__all__ = ["MIN_SAMPLES", "Statistic", "block_indices", "block_length", "statistic_for"]

MIN_SAMPLES = 20  # fewer samples (or time buckets) on a side: no interval
MAX_VALUES = 50_000  # values per side a bootstrap draws from; above, a random run of whole blocks (wider interval)
MAX_GAPS = 400_000  # the same for ITL's pooled gaps
_CELLS = 4_000_000  # resamples x values computed at once (memory)
LATENCY = ("ttft", "tpot", "e2el")

Reduce = Callable[[np.ndarray], np.ndarray]  # (B, n) -> (B,)


def _reducer(stat: str) -> Reduce | None:
    """The statistic `mean`, `median`, `std` or `pN` along axis 1, in ms of seconds; None for others (max)."""
    if stat == "mean":
        return lambda a: a.mean(axis=1)
    if stat == "median":
        return lambda a: np.median(a, axis=1)
    if stat == "std":
        return lambda a: a.std(axis=1)  # population, as vLLM
    if stat.startswith("p"):
        try:
            q = float(stat[1:])
        except ValueError:
            return None
        if 0.0 < q < 100.0:
            return lambda a: np.percentile(a, q, axis=1)
    return None  # max (a bootstrap of a maximum is no estimate of its noise), unknown names


def block_length(n: int, concurrency: float = 1.0) -> int:
    """Block length for `n` ordered values: n^(1/3) (the usual rate), at least the mean concurrency, and short
    enough for ten blocks."""
    return int(max(1, min(max(math.ceil(n ** (1 / 3)), round(concurrency)), n // 10)))


def block_indices(n: int, length: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` circular block-bootstrap resamples of range(n), as a (count, n) index array."""
    k = -(-n // length)
    starts = rng.integers(0, n, size=(count, k))
    idx = (starts[:, :, None] + np.arange(length)) % n
    return idx.reshape(count, k * length)[:, :n]


def _subsample(n: int, length: int, cap: int, rng: np.random.Generator) -> np.ndarray | None:
    """Indices of random whole blocks holding about `cap` of `n` ordered values (in order); None when n <= cap."""
    if n <= cap:
        return None
    blocks = np.sort(rng.choice(n // length, size=max(1, cap // length), replace=False))
    return (blocks[:, None] * length + np.arange(length)).ravel()


def _batched(n: int, length: int, b: int, rng: np.random.Generator, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """fn over `b` block resamples of range(n), computed a few at a time."""
    per = max(1, _CELLS // max(n, 1))
    return np.concatenate([fn(block_indices(n, length, min(per, b - s), rng)) for s in range(0, b, per)])


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
        values = _itl(run)[0] if self.kind == "itl" else _latency(self.name, run)
        if not values.size:
            return None
        return float(self._reduce(values[None, :])[0] * self._scale)

    def size(self, run: RunSamples) -> int:
        """How many samples (requests, or time buckets for a rate) the bootstrap resamples."""
        if self.kind == "rate":
            return _buckets(run) if _has_rate(self.name, run) else 0
        if self.kind == "ratio":
            return int(_ratio_parts(self.name, run)[1].size)
        return int(_itl(run)[1].size if self.kind == "itl" else _latency(self.name, run).size)

    def resample(self, run: RunSamples, b: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
        """`b` bootstrap values of the statistic less the value they were resampled from, and how (one line)."""
        if self.kind == "rate":
            return self._resample_rate(run, b, rng)
        if self.kind == "itl":
            return self._resample_itl(run, b, rng)
        if self.kind == "ratio":
            num, den = _ratio_parts(self.name, run)
            n = num.size
            length = block_length(n, run.concurrency)
            sub = _subsample(num.size, length, MAX_VALUES, rng)
            num, den = (num, den) if sub is None else (num[sub], den[sub])
            base = num.sum() / den.sum() if den.sum() > 0 else 0.0

            def ratio(ix: np.ndarray) -> np.ndarray:
                d = den[ix].sum(axis=1)
                return np.divide(num[ix].sum(axis=1), d, out=np.zeros(d.shape), where=d > 0)

            return _batched(num.size, length, b, rng, ratio) - base, _how(n, length, sub, "requests")
        values = _latency(self.name, run)
        length = block_length(values.size, run.concurrency)
        sub = _subsample(values.size, length, MAX_VALUES, rng)
        v = values if sub is None else values[sub]
        base = self._reduce(v[None, :])[0]
        out = _batched(v.size, length, b, rng, lambda ix: self._reduce(v[ix]))
        return (out - base) * self._scale, _how(values.size, length, sub, "requests")

    # ----------------------------------------------------------------------------------------- helpers
    @property
    def _stat(self) -> str:
        return self.name.split("_", 1)[0]

    @property
    def _scale(self) -> float:
        return 1000.0 if self.kind in ("latency", "itl") else 1.0

    def _reduce(self, a: np.ndarray) -> np.ndarray:
        fn = _reducer(self._stat)
        assert fn is not None  # statistic_for made only statistics it can reduce
        return fn(a)

    def _resample_itl(self, run: RunSamples, b: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
        gaps, per_req = _itl(run)
        n = per_req.size
        length = block_length(n, run.concurrency)
        mean_gaps = max(1.0, gaps.size / max(n, 1))
        sub = _subsample(n, length, int(MAX_GAPS / mean_gaps), rng)
        reqs = np.arange(n) if sub is None else sub
        first = np.cumsum(per_req) - per_req
        lens, firsts = per_req[reqs], first[reqs]
        base_gaps = gaps[np.repeat(firsts - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))]
        base = self._reduce(base_gaps[None, :])[0]
        out = np.empty(b)
        for i, ix in enumerate(block_indices(reqs.size, length, b, rng)):  # one pooled sample per resample
            ln, fs = lens[ix], firsts[ix]
            take = np.repeat(fs - (np.cumsum(ln) - ln), ln) + np.arange(int(ln.sum()))
            out[i] = self._reduce(gaps[take][None, :])[0]
        return (out - base) * self._scale, _how(n, length, sub, "requests")

    def _resample_rate(self, run: RunSamples, b: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
        sums = _bucket_sums(self.name, run)
        k = sums.size
        length = block_length(k)
        # the statistic of a resample is its total over the run's duration: buckets tile the duration
        out = _batched(k, length, b, rng, lambda ix: sums[ix].sum(axis=1)) / run.duration
        width = run.duration / k
        return out - sums.sum() / run.duration, f"{k} time buckets of {width:.3g} s, blocks of {length}"


def _how(n: int, length: int, sub: np.ndarray | None, what: str) -> str:
    """'200 requests, blocks of 8' (or 'a subsample of 50000 of 1000000 requests, ...')."""
    drawn = f"{n} {what}" if sub is None else f"a subsample of {sub.size} of {n} {what}"
    return f"{drawn}, blocks of {length}"


def statistic_for(name: str) -> Statistic | None:
    """The statistic behind metric `name` when the samples define it; None for figures with no samples."""
    if name in ("request_throughput", "output_throughput", "total_token_throughput", "request_goodput"):
        return Statistic(name, "rate")
    if name in ("error_rate", "validity_rate", "prefix_cache_hit_rate", "chunk_token_ratio"):
        return Statistic(name, "ratio")
    stat, _, rest = name.partition("_")
    metric = rest.removesuffix("_ms")
    if not rest.endswith("_ms") or _reducer(stat) is None:
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
    if name == "validity_rate":
        rows = run.valid != -1
        return (run.valid[rows] == 1).astype(np.float64), np.ones(int(rows.sum()))
    ok = run.outcome == OK
    if name == "prefix_cache_hit_rate":
        rows = ok & (run.cached != -1)
        return np.maximum(run.cached[rows], 0).astype(np.float64), np.maximum(run.in_tok[rows], 0).astype(np.float64)
    # chunk_token_ratio: chunks / output tokens of the successes
    return run.lens[ok].astype(np.float64), np.maximum(run.out_tok[ok], 0).astype(np.float64)


# ------------------------------------------------------------------------------------- throughput buckets
def _has_rate(name: str, run: RunSamples) -> bool:
    """A run has the rate: it sent requests (and, for goodput, had an SLO)."""
    return run.n > 0 and (name != "request_goodput" or bool((run.good != -1).any()))


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
    if name == "request_throughput":
        return at(ends, np.ones(ok.size))
    if name == "request_goodput":
        return at(ends, (run.good[ok] == 1).astype(np.float64))
    lens = run.lens[ok]
    per_chunk = np.repeat(np.maximum(run.out_tok[ok], 0) / np.maximum(lens, 1), lens)
    chunk_times = np.repeat(run.start[ok], lens) + run.chunks / 1e6  # only the successes keep chunks
    out = at(chunk_times, per_chunk)
    if name == "total_token_throughput":
        out += at(ends, np.maximum(run.in_tok[ok], 0).astype(np.float64))
    return out
