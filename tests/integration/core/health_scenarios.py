"""Client-health scenarios whose cause is known, each run in its own process under the real HealthSampler.

    python -m tests.integration.core.health_scenarios CASE [SECONDS]    # prints {"samples": take(), "spinners"}
    python -m tests.integration.core.health_scenarios --record FILE     # every case, into the labelled fixture

The process pins itself to one core, so that a case's load and the sampler share it:
- healthy: light client work (0.5 ms of CPU every 5 ms);
- cpu_saturated: greenlets that never sleep (2 ms of CPU, then yield);
- loop_blocked_busy: a sleep-free busy handler holds the loop 30 ms every 200 ms;
- loop_blocked_call: a blocking call (an unpatched time.sleep) holds the loop 30 ms every 200 ms, using no CPU;
- machine_busy: light work at nice 10 while two other processes spin on the same core (each ends itself after
  the run, and is ended by its PID here);
- too_short: light work for 1.5 s with the default 2-s loop warm-up (no loop probe falls in the run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import gevent

from vllm_users.measure.health import WARMUP_S, HealthSampler

SPIN = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "print('spinning', flush=True)\n"
    "end = time.monotonic() + float(sys.argv[2])\n"
    "while time.monotonic() < end:\n"
    "    pass\n"
)
SPINNERS = 2
NICE = 10  # the measured process yields to the spinners, as a worker beside a busy server's threads does


def _cpu(seconds: float) -> None:
    """Use the CPU for `seconds` without yielding to the loop."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _light(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _cpu(0.0005)
        gevent.sleep(0.005)


def _saturated(seconds: float) -> None:
    def spin() -> None:
        while time.perf_counter() < end:
            _cpu(0.002)
            gevent.sleep(0)

    end = time.perf_counter() + seconds
    gevent.joinall([gevent.spawn(spin) for _ in range(4)])


def _blocked(hold: Callable[[float], None]) -> Callable[[float], None]:
    def work(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            gevent.sleep(0.2)
            hold(0.03)

    return work


WORK: dict[str, Callable[[float], None]] = {
    "healthy": _light,
    "cpu_saturated": _saturated,
    "loop_blocked_busy": _blocked(_cpu),
    "loop_blocked_call": _blocked(
        time.sleep
    ),  # not monkey-patched here: it blocks the loop, like a C library
    "machine_busy": _light,
    "too_short": _light,
}
EXPECTED = {
    "healthy": "ok",
    "cpu_saturated": "cpu_saturated",
    "loop_blocked_busy": "loop_blocked",
    "loop_blocked_call": "loop_blocked",
    "machine_busy": "machine_busy",
    "too_short": "too_short",
}


def _spinners(core: int, seconds: float) -> list[subprocess.Popen[str]]:
    """SPINNERS processes busy-looping on `core` for at most `seconds`, each running before this returns."""
    kids = [
        subprocess.Popen(
            [sys.executable, "-c", SPIN, str(core), str(seconds)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(SPINNERS)
    ]
    for k in kids:
        assert k.stdout is not None and k.stdout.readline().strip() == "spinning"
    return kids


def run(case: str, seconds: float) -> dict[str, Any]:
    """Run `case` for `seconds` on one core: the sampler's take() and the PIDs of the spinners it ended."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    kids = _spinners(core, seconds + 5) if case == "machine_busy" else []
    try:
        if kids:
            os.nice(NICE)
        hs = HealthSampler()
        hs.start(warmup_s=WARMUP_S if case == "too_short" else 0.0)
        gevent.spawn(WORK[case], 1.5 if case == "too_short" else seconds).join()
        hs.stop()
        return {"samples": hs.take(), "spinners": [k.pid for k in kids]}
    finally:
        for k in kids:  # by PID: these are ours
            k.kill()
            k.wait(timeout=10)


def record(path: str, seconds: float = 3.0) -> None:
    """Run every case in its own process and write the labelled fixture to `path`."""
    cases = {}
    for case in WORK:
        out = subprocess.run(
            [sys.executable, "-m", __spec__.name if __spec__ else __name__, case, str(seconds)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        samples = json.loads(out)["samples"]
        cases[case] = {
            "cause": EXPECTED[case],
            "samples": {k: [round(x, 4) for x in v] for k, v in samples.items()},
        }
    with open(path, "w") as fh:
        json.dump({"machine": os.uname().release, "seconds": seconds, "cases": cases}, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    if sys.argv[1] == "--record":
        record(sys.argv[2])
    else:
        print(json.dumps(run(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 3.0)))
