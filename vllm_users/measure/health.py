"""Client health: sample this worker's CPU use and gevent loop lag, to know when the client is the bottleneck."""

from __future__ import annotations

import functools
import gc
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import gevent
import numpy as np

# Thresholds (documented in docs/metrics.md and README.md): past either, results are marked client_bound.
CPU_BOUND_FRACTION = 0.90  # mean CPU of one worker process over the run, of one core
# p99 of the extra delay of a 50 ms gevent sleep. 10 ms: the open-loop "late" threshold (metrics.LATE_THRESHOLD_S),
# and measured: at loop-lag p99 11 ms (256 streams) our TTFT p99 error was +10.4 ms; the lag reaches the tail 1:1.
LOOP_LAG_P99_MS = 10.0
WARMUP_S = 2.0  # samples start this long after the test starts


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
    gc.callbacks."""

    def __init__(self, interval: float = 1.0, lag_probe: float = 0.05) -> None:
        self.interval = interval
        self.lag_probe = lag_probe
        self.cpu: list[float] = []
        self.lag_ms: list[float] = []
        self.runq_ms: list[float] = []  # per lag probe: ms the loop's thread was runnable but not on a CPU
        self.gc_ms: list[float] = []  # pauses >= GC_PAUSE_KEEP_MS
        self.gc_count = 0
        self.gc_total_ms = 0.0
        self._gc_t0 = 0.0
        self._warmup_s = WARMUP_S
        self._g: gevent.Greenlet | None = None

    def _on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
            return
        ms = (time.perf_counter() - self._gc_t0) * 1000.0
        self.gc_count += 1
        self.gc_total_ms += ms
        if ms >= GC_PAUSE_KEEP_MS:
            self.gc_ms.append(round(ms, 3))

    def start(self, warmup_s: float = WARMUP_S) -> None:
        """Begin sampling `warmup_s` from now (idempotent)."""
        if self._g is None:
            self._warmup_s = warmup_s
            self._g = gevent.spawn(self._run)
            gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        """Stop sampling."""
        if self._g is not None:
            self._g.kill(block=False)
            self._g = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _run(self) -> None:
        gevent.sleep(self._warmup_s)  # user spawning is not steady state (open loop: sampling starts at t0)
        loop = gevent.get_hub().loop
        fd = _open_schedstat()  # here: every greenlet runs on this thread
        try:
            self._sample(loop, None if fd is None else functools.partial(_runq_ns, fd))
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
        if self.runq_ms:  # in step with lag_ms (absent where the kernel does not tell)
            out["runq_ms"] = self.runq_ms
        self.cpu, self.lag_ms, self.gc_ms, self.runq_ms = [], [], [], []
        self.gc_count, self.gc_total_ms = 0, 0.0
        return out


def _runq_ns(fd: int) -> int:
    """The thread's total run-queue wait in ns so far (one pread: ~1 µs)."""
    return int(os.pread(fd, 128, 0).split()[1])


def _open_schedstat() -> int | None:
    """The calling thread's schedstat, open; None where the kernel has none (not Linux, no schedstats)."""
    try:
        fd = os.open(SCHEDSTAT, os.O_RDONLY)
    except OSError:
        return None
    try:
        _runq_ns(fd)
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
    runq_ms is thinned in step with lag_ms (they are paired); GC pauses and counts are kept whole (summed)."""
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


def summarize(samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Per-worker and overall client health with the client_bound verdict."""
    workers: dict[str, Any] = {}
    bound = False
    for name, s in sorted(samples.items()):
        cpu = np.asarray(s.get("cpu") or [0.0])
        lag = np.asarray(s.get("lag_ms") or [0.0])
        row: dict[str, Any] = {
            "cpu_mean": float(cpu.mean()),
            "cpu_max": float(cpu.max()),
            "loop_lag_p50_ms": float(np.percentile(lag, 50)),
            "loop_lag_p99_ms": float(np.percentile(lag, 99)),
            "loop_lag_max_ms": float(lag.max()),
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
        row["client_bound"] = row["cpu_mean"] > CPU_BOUND_FRACTION or row["loop_lag_p99_ms"] > LOOP_LAG_P99_MS
        bound = bound or row["client_bound"]
        workers[name] = row
    return {
        "client_bound": bound,
        "thresholds": {"cpu_mean": CPU_BOUND_FRACTION, "loop_lag_p99_ms": LOOP_LAG_P99_MS},
        "workers": workers,
    }
