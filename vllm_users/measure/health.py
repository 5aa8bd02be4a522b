"""Client health: sample this worker's CPU use and gevent loop lag, and tell which of three causes delayed the
client (our CPU saturated, our code blocking the loop, or other load on the machine), to know when the client is
the bottleneck."""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import gevent
import numpy as np

from vllm_users.measure.client_verdict import (
    CPU_BOUND_FRACTION,
    LOOP_LAG_P99_MS,
    MIN_JUDGE_S,
    RUNQ_SHARE_BUSY,
    classify,
    client_bound_of,
    overall,
)

# The thresholds and the verdict on them live in client_verdict.
WARMUP_S = 2.0  # loop-lag probes start this long after the test starts (CPU is counted from the start)
LAG_PROBE_S = 0.05  # a loop-lag probe: the extra delay of a sleep this long


# lag samples over this are explained, where the kernel tells (Linux /proc/thread-self/schedstat), by the time the
# loop's thread waited for a CPU in the same window: a busy machine, not our code (lag was seen with "idle" CPUs)
LAG_EXPLAINED_OVER_MS = 5.0
SCHEDSTAT = "/proc/thread-self/schedstat"  # "on-CPU ns, run-queue wait ns, timeslices" of the calling thread

GC_PAUSE_KEEP_MS = 0.5  # garbage-collector pauses at least this long are kept one by one (the rest: counted)
# Generation-0 threshold of a worker (Python's default is 700 allocations). Measured (bench_fidelity --gc, 3 reps
# interleaved, docs/benchmarks.md): 5000 cut a worker's collections 2-4x and its longest pause from 6-11 ms to
# 1.6-2.7 ms (full collections, which follow from the young ones, became ~4x rarer) at the same TTFT error.
# VLLM_LOCUST_GC_GEN0=0 leaves Python's threshold alone.
GC_GEN0_DEFAULT = 5000


def gc_settings(env: Mapping[str, str]) -> tuple[bool, int]:
    """(gc.freeze after spawn, generation-0 threshold or 0 for Python's) from VLLM_LOCUST_GC_FREEZE/_GEN0."""
    gen0 = env.get("VLLM_LOCUST_GC_GEN0", "").strip()
    if gen0 and not gen0.isdigit():
        raise ValueError(f"VLLM_LOCUST_GC_GEN0={gen0!r}: expected a whole number (0: Python's default)")
    # freeze: off by default, since it did not shorten a pause (most of a worker's heap is made after start-up)
    return env.get("VLLM_LOCUST_GC_FREEZE", "0") == "1", int(gen0) if gen0 else GC_GEN0_DEFAULT


try:
    GC_FREEZE, GC_GEN0 = gc_settings(os.environ)
except ValueError as e:  # bad input: one line and a non-zero exit, in whichever process reads it first
    sys.exit(f"vllm-locust: {e}")


def tune_gc_after_start() -> None:
    """Once the users are started: move every object alive now out of the collector's sight (gc.freeze, so
    full collections stop re-scanning modules, options and prompts) and apply VLLM_LOCUST_GC_GEN0."""
    if GC_FREEZE:
        gc.freeze()
    if GC_GEN0 > 0:
        _g0, g1, g2 = gc.get_threshold()
        gc.set_threshold(GC_GEN0, g1, g2)


class HealthSampler:
    """A greenlet that samples CPU fraction every second and loop lag every 50 ms (with, where Linux tells, how
    long the loop's thread waited for a CPU in each probe's window); garbage-collector pauses are timed through
    gc.callbacks. The process's CPU time (and, where Linux tells, the loop thread's time on a CPU and waiting for
    one) is also read at the run's start, at each take and at stop, so the CPU over the whole run is known however
    short the run, warm-up included."""

    def __init__(self, interval: float = 1.0, lag_probe: float = LAG_PROBE_S) -> None:
        self.interval = interval
        self.lag_probe = lag_probe
        self.cpu: list[float] = []
        self.lag_ms: list[float] = []
        self.runq_ms: list[float] = []  # per lag probe: ms the loop's thread was runnable but not on a CPU
        self.probed_s = 0.0  # the time the lag probes covered: their sleeps and their lag
        self.gc_ms: list[float] = []  # pauses >= GC_PAUSE_KEEP_MS
        self.gc_count = 0
        self.gc_total_ms = 0.0
        self._gc_t0 = 0.0
        self._warmup_s = WARMUP_S
        self._run_in_s = 0.0
        self._g: gevent.Greenlet | None = None
        self._fd: int | None = None  # the loop thread's schedstat, for the marks (None: not told)
        self._mark: _Mark | None = None  # at the run's start or the last take; None before and after the run
        self._end: _Mark | None = None  # at stop

    def _on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
            return
        ms = (time.perf_counter() - self._gc_t0) * 1000.0
        self.gc_count += 1
        self.gc_total_ms += ms
        if ms >= GC_PAUSE_KEEP_MS:
            self.gc_ms.append(round(ms, 3))

    def start(self, warmup_s: float = WARMUP_S, run_starts_in_s: float = 0.0) -> None:
        """Count CPU from the run's start, `run_starts_in_s` from now, and probe the loop from `warmup_s` from now
        (idempotent)."""
        if self._g is None:
            self._warmup_s = warmup_s
            self._run_in_s = max(0.0, min(run_starts_in_s, warmup_s))
            self._end = None
            self._fd = _open_schedstat()  # here: the loop's thread, where every greenlet runs
            if self._run_in_s <= 0:
                self._mark = self._now()
            self._g = gevent.spawn(self._run)
            gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        """Stop sampling; the CPU up to now goes into the next take."""
        if self._g is not None:
            self._g.kill(block=False)
            self._g = None
            if self._mark is not None:
                self._end = self._now()
            if self._fd is not None:  # the marks' own: the probes read theirs, closed by their greenlet
                os.close(self._fd)
                self._fd = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _run(self) -> None:
        if self._run_in_s > 0:  # open loop: the run starts at t0
            gevent.sleep(self._run_in_s)
            if self._g is not gevent.getcurrent():  # stopped meanwhile
                return
            self._mark = self._now()
        # user spawning is not steady state for the loop (open loop: probes start at t0)
        gevent.sleep(self._warmup_s - self._run_in_s)
        fd = _open_schedstat()  # here: every greenlet runs on this thread
        try:
            self._sample(gevent.get_hub().loop, None if fd is None else lambda: _schedstat_ns(fd)[1])
        finally:
            if fd is not None:
                os.close(fd)

    def _sample(self, loop: Any, runq: Callable[[], int] | None) -> None:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        next_cpu = wall0 + self.interval
        waited = runq() if runq is not None else 0
        while True:
            # the probe's timer is armed from the loop's cached clock, which lags by whatever ran in this
            # iteration before us: refreshed first, the sleep is 50 ms from now and its overshoot all lag
            loop.update_now()
            t = time.perf_counter()
            gevent.sleep(self.lag_probe)
            now = time.perf_counter()
            self.lag_ms.append(max(0.0, (now - t - self.lag_probe) * 1000.0))
            self.probed_s += now - t
            if runq is not None:
                w = runq()
                self.runq_ms.append(round((w - waited) / 1e6, 3))
                waited = w
            if now >= next_cpu:
                c = time.process_time()
                self.cpu.append((c - cpu0) / (now - wall0))
                wall0, cpu0, next_cpu = now, c, now + self.interval

    def take(self) -> dict[str, list[float]]:
        """Samples since the last take (for a report to the master)."""
        out = {
            "cpu": self.cpu,
            "lag_ms": self.lag_ms,
            "gc_ms": self.gc_ms,
            "gc_count": [float(self.gc_count)],
            "gc_total_ms": [round(self.gc_total_ms, 3)],
        }
        if self._mark is not None:  # the process's CPU seconds over the wall seconds since the last take
            end = self._end or self._now()
            out["wall_s"] = [end.wall - self._mark.wall]
            out["cpu_s"] = [end.cpu - self._mark.cpu]
            if end.loop_ns is not None and self._mark.loop_ns is not None:
                out["loop_cpu_s"] = [(end.loop_ns[0] - self._mark.loop_ns[0]) / 1e9]
                out["loop_runq_s"] = [(end.loop_ns[1] - self._mark.loop_ns[1]) / 1e9]
            self._mark = None if self._end is not None else end
        if self.runq_ms:  # in step with lag_ms (absent where the kernel does not tell)
            out["runq_ms"] = self.runq_ms
        if self.lag_ms:
            out["lag_span_s"] = [self.probed_s]
        self.cpu, self.lag_ms, self.gc_ms, self.runq_ms, self.probed_s = [], [], [], [], 0.0
        self.gc_count, self.gc_total_ms = 0, 0.0
        return out

    def _now(self) -> _Mark:
        """The clocks now: wall, this process's CPU (every thread, user and system), the loop thread's schedstat."""
        return _Mark(
            time.perf_counter(), time.process_time(), None if self._fd is None else _schedstat_ns(self._fd)
        )


class _Mark(NamedTuple):
    wall: float
    cpu: float
    loop_ns: tuple[int, int] | None  # the loop thread's (on-CPU, run-queue wait) ns so far


def _schedstat_ns(fd: int) -> tuple[int, int]:
    """The thread's total (on-CPU, run-queue wait) in ns so far (one pread: ~1 µs)."""
    on_cpu, waited = os.pread(fd, 128, 0).split()[:2]
    return int(on_cpu), int(waited)


def _open_schedstat() -> int | None:
    """The calling thread's schedstat, open; None where the kernel has none (not Linux, no schedstats)."""
    try:
        fd = os.open(SCHEDSTAT, os.O_RDONLY)
    except OSError:
        return None
    try:
        _schedstat_ns(fd)
    except (OSError, ValueError, IndexError):
        os.close(fd)
        return None
    return fd


def _lag_from_runq(lag: np.ndarray, runq: np.ndarray) -> float | None:
    """Of the lag in samples over LAG_EXPLAINED_OVER_MS, the share that waiting for a CPU can explain (at most)."""
    n = min(lag.size, runq.size)
    big = lag[:n] > LAG_EXPLAINED_OVER_MS
    if not n or not big.any():
        return None
    return float(np.minimum(runq[:n][big], lag[:n][big]).sum() / lag[:n][big].sum())


KEPT_SAMPLES = 20_000  # per worker and series, on the master: ~17 min of 50-ms lag probes, then thinned


def bound(samples: dict[str, list[float]], cap: int = KEPT_SAMPLES) -> None:
    """Thin one worker's accumulated CPU and loop-lag series (in place) to at most `cap` samples each, keeping
    every other sample and the largest: a long run's master would otherwise hold every probe (~2.6 MiB/h per
    worker, the soak benchmark), while summarize's means, percentiles and maxima need only a fair sample.
    runq_ms is thinned in step with lag_ms (they are paired); GC pauses and counts are kept whole (summed), the
    CPU and wall seconds of the run are summed into one figure each."""
    for name in ("cpu_s", "wall_s", "loop_cpu_s", "loop_runq_s", "lag_span_s"):
        if len(samples.get(name) or ()) > 1:
            samples[name] = [float(sum(samples[name]))]
    for name, paired in (("lag_ms", "runq_ms"), ("cpu", "")):
        xs = samples.get(name)
        if not xs or len(xs) <= cap:
            continue
        top = max(range(len(xs)), key=xs.__getitem__)
        keep = sorted({*range(0, len(xs), 2), top})
        ys = samples.get(paired) if paired else None
        if ys is not None and len(ys) == len(xs):
            samples[paired] = [ys[i] for i in keep]
        samples[name] = [xs[i] for i in keep]


def _over_run(s: Mapping[str, list[float]], name: str) -> float | None:
    """Seconds of `name` (cpu_s, loop_cpu_s, loop_runq_s) per second of the run; None where not measured or the
    run is shorter than MIN_JUDGE_S."""
    wall = float(sum(s.get("wall_s") or ()))
    if not s.get(name) or wall < MIN_JUDGE_S:
        return None
    return round(float(sum(s[name])) / wall, 4)


def _cpu(s: Mapping[str, list[float]]) -> float | None:
    """Mean CPU over the run, of one core: from the process's CPU times at the run's start and end where the
    worker sent them, else (a worker of an older version) the mean of its 1-s samples; None where none."""
    if s.get("wall_s"):
        return _over_run(s, "cpu_s")
    periodic = s.get("cpu") or []
    return round(float(np.mean(periodic)), 4) if periodic else None


def _lag_span(s: Mapping[str, list[float]], lag: np.ndarray) -> float | None:
    """Seconds the loop-lag probes covered; None where none ran. A worker of an older version: from the probes."""
    if s.get("lag_span_s"):
        return round(float(sum(s["lag_span_s"])), 3)
    return round(lag.size * LAG_PROBE_S + float(lag.sum()) / 1000.0, 3) if lag.size else None


def _worker(s: Mapping[str, list[float]]) -> dict[str, Any]:
    """One worker's health row: the evidence (None where not measured) and its verdict."""
    periodic = s.get("cpu") or []
    lag = np.asarray(s.get("lag_ms") or [], dtype=float)
    on_cpu, waited = _over_run(s, "loop_cpu_s"), _over_run(s, "loop_runq_s")
    row: dict[str, Any] = {
        "cpu_mean": _cpu(s),
        "cpu_max": float(max(periodic)) if periodic else None,
        "run_s": round(float(sum(s["wall_s"])), 3) if s.get("wall_s") else None,
        # the loop thread's share of the run on a CPU or waiting for one (the rest: idle, free for more work),
        # and its share waiting: where Linux tells
        "loop_busy_share": None if on_cpu is None or waited is None else round(on_cpu + waited, 4),
        "runq_wait_share": waited,
        # the time the probes covered (their sleeps and their lag: few probes when each is late)
        "loop_lag_span_s": _lag_span(s, lag),
        "loop_lag_p50_ms": float(np.percentile(lag, 50)) if lag.size else None,
        "loop_lag_p99_ms": float(np.percentile(lag, 99)) if lag.size else None,
        "loop_lag_max_ms": float(lag.max()) if lag.size else None,
    }
    if "gc_count" in s:  # garbage-collector pauses (workers that report them)
        gcs = s.get("gc_ms") or [0.0]
        row["gc_collections"] = int(sum(s.get("gc_count") or ()))
        row["gc_total_ms"] = round(float(sum(s.get("gc_total_ms") or ())), 3)
        row["gc_pause_max_ms"] = float(max(gcs))
        row["gc_pauses_over_1ms"] = sum(1 for x in gcs if x >= 1.0)
    if s.get("runq_ms"):  # how much of the lag was the machine (no free CPU), not the worker's own code
        runq = np.asarray(s["runq_ms"])
        row["runq_wait_p99_ms"] = float(np.percentile(runq, 99))
        share = _lag_from_runq(lag, runq)
        row["lag_runq_share"] = None if share is None else round(share, 3)
    row["verdict"] = classify(row)
    row["client_bound"] = client_bound_of([row["verdict"]])
    return row


def summarize(samples: Mapping[str, Mapping[str, list[float]]]) -> dict[str, Any]:
    """Per-worker and overall client health: each worker's evidence and verdict (client_verdict.classify), the
    run's verdict (its workers' most severe) and client_bound (True, False, or None: not judged)."""
    workers = {name: _worker(s) for name, s in sorted(samples.items())}
    verdicts = [w["verdict"] for w in workers.values()]
    return {
        "client_bound": client_bound_of(verdicts),
        "verdict": overall(verdicts),
        "thresholds": {
            "cpu_mean": CPU_BOUND_FRACTION,
            "loop_lag_p99_ms": LOOP_LAG_P99_MS,
            "lag_runq_share": RUNQ_SHARE_BUSY,
            "judge_s": MIN_JUDGE_S,
        },
        "workers": workers,
    }
