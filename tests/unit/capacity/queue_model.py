"""A step of the search on a queue model, as the saturation watch sees it: Poisson arrivals at a rate, a server of
`seats` that answers each request in its duration (first come, first served; a request waits for a free seat),
and the progress samples the master writes every 2 s from the workers' totals (up to 1 s old)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestration.capacity.search import STEP_MAX, STEP_MIN, STEP_SECONDS

Duration = Callable[[random.Random], float]
PROGRESS_EVERY_S, BATCH_EVERY_S, POLL_S = 2.0, 1.0, 0.5


def fixed(seconds: float) -> Duration:
    """Every request takes `seconds`."""
    return lambda _rng: seconds


def spread(seconds: float) -> Duration:
    """Uniform over 0.5-1.5 x `seconds` (output lengths that vary)."""
    return lambda rng: rng.uniform(0.5 * seconds, 1.5 * seconds)


def step_count(rate: float) -> int:
    """How many requests the search's step at `rate` sends (orchestration.capacity.search._step_size)."""
    return int(min(STEP_MAX, max(STEP_MIN, round(rate * STEP_SECONDS))))


@dataclass(frozen=True)
class Step:
    """One simulated step: each request's arrival and end (s from the step's start)."""

    arrivals: list[float]
    ends: list[float]

    @property
    def last_end(self) -> float:
        """When the step ends: its last answer."""
        return max(self.ends)


def simulate(
    rate: float, duration: Duration, seats: int, rng: random.Random, count: int | None = None
) -> Step:
    """A step of `count` (default step_count(rate)) Poisson arrivals on a first-come-first-served server of
    `seats`."""
    t, arrivals, ends = 0.0, [], []
    free = [0.0] * seats
    for _ in range(count or step_count(rate)):
        t += rng.expovariate(rate)
        start = max(t, heapq.heappop(free))
        end = start + duration(rng)
        heapq.heappush(free, end)
        arrivals.append(t)
        ends.append(end)
    return Step(arrivals, ends)


def progress(step: Step, at: float, rng: random.Random) -> dict[str, Any]:
    """The progress sample written at `at`: the totals of the workers' last batch (0-1 s before)."""
    seen = at - rng.uniform(0.0, BATCH_EVERY_S)
    sent = sum(a <= seen for a in step.arrivals)
    lat = [e - a for a, e in zip(step.arrivals, step.ends, strict=True) if e <= seen]
    return {
        "elapsed_s": round(at, 1),
        "ok": len(lat),
        "failed": 0,
        "inflight": sent - len(lat),
        "e2el_sum_s": sum(lat),
    }


def watch_step(watch: Callable[[dict[str, Any]], str | None], step: Step, rng: random.Random) -> float | None:
    """Run `watch` over the step as the launcher does (every 0.5 s, on the latest sample): when it stopped the
    step (s), or None."""
    written = rng.uniform(0.0, PROGRESS_EVERY_S)
    sample: dict[str, Any] | None = None
    for k in range(1, int((step.last_end + 2 * PROGRESS_EVERY_S) / POLL_S) + 1):  # bounded: the step's length
        now = k * POLL_S
        if now >= written:
            sample = progress(step, written, rng)
            written += PROGRESS_EVERY_S
        if sample is not None and watch(dict(sample)):
            return now
    return None
