"""The search's saturation watch on a queue model (queue_model.py) and on the reported cases: no stop while the
server keeps up, however long its requests; a stop before the step ends when it cannot keep up."""

from __future__ import annotations

import random

import pytest

from orchestration.capacity import saturation as S
from tests.unit.capacity.queue_model import Duration, fixed, simulate, spread, watch_step
from vllm_users.measure.metrics import Slo

CAPACITY = 16.0  # req/s: seats = capacity x request duration
SEEDS = 100
NO_SLO = Slo({"ttft": 1e9})


def _stops(
    load: float, seconds: float, duration: Duration, seeds: int = SEEDS, count: int | None = None
) -> list[float]:
    """The fraction of the step (0-1) at which the watch stopped it, for each seed that was stopped."""
    seats = round(CAPACITY * seconds)
    rate = load * seats / seconds
    out = []
    for seed in range(seeds):
        rng = random.Random(f"{load}-{seconds}-{seed}")
        step = simulate(rate, duration, seats, rng, count)
        at = watch_step(S.SaturationWatch(NO_SLO, rate), step, rng)
        if at is not None:
            out.append(at / step.last_end)
    return out


@pytest.mark.parametrize("seconds", [0.25, 1.0, 3.0, 5.0])
@pytest.mark.parametrize("load", [0.5, 0.8, 0.95])
def test_no_stop_while_the_server_keeps_up(load: float, seconds: float) -> None:
    # below capacity the in-flight count climbs from 0 to rate x latency over the first latency (a 5-s request
    # holds 5 s of arrivals) and then wanders with the Poisson arrivals: no seed may read that as over-saturated
    for duration in (fixed(seconds), spread(seconds)):
        assert _stops(load, seconds, duration) == []


@pytest.mark.parametrize(("seconds", "least"), [(0.25, 0.95), (1.0, 0.95), (3.0, 0.75), (5.0, 0.1)])
def test_twice_the_capacity_is_stopped_before_the_step_ends(seconds: float, least: float) -> None:
    # the step's ~9 s of arrivals (300 requests at 32 req/s) hold only 2 latencies of 5-s requests: the overdue
    # count has less time to climb past the spread of the arrivals, and most such steps run to their end (their
    # verdict fails them: the achieved rate, the TTFT trend, the server's queue)
    stops = _stops(2.0, seconds, fixed(seconds))
    assert len(stops) >= least * SEEDS and all(f < 1.0 for f in stops)


def test_a_fifth_over_capacity_is_stopped_in_a_long_step() -> None:
    # 1.2 x the capacity: the queue grows by a fifth of the capacity a second, which a step of 10 s cannot tell
    # from a queue that wanders near capacity (0.95 x: its Poisson arrivals alone move it by sqrt(2 x sent));
    # those steps fail by their verdict. Over a step 6 x as long (--num-prompts 1200) the growth shows.
    stops = _stops(1.2, 0.25, fixed(0.25), count=1200)
    assert len(stops) >= 0.8 * SEEDS and all(f < 1.0 for f in stops)


def _samples(watch: S.SaturationWatch, rows: list[tuple[float, int, int, float]]) -> list[str | None]:
    """Feed (elapsed s, completed, in flight, mean latency s) samples; each call's answer."""
    return [
        watch({"elapsed_s": t, "ok": ok, "failed": 0, "inflight": n, "e2el_sum_s": ok * w})
        for t, ok, n, w in rows
    ]


def test_reported_twin_step_is_not_stopped() -> None:
    # a twin of `sim --decode-step-ms 15 --decode-per-seq-ms 0.5 --max-num-seqs 24`, 5.565 req/s: the step
    # completed 54 of 56 on schedule, p99 TTFT 56.6 ms of 500, and was stopped "in-flight requests grew from 3 to
    # 11 in 4.0 s: over-saturated". Its samples, rebuilt from those numbers: arrivals from 1.2 s, ~2-s requests
    # (the first ones answered are the short ones), 5.565 x 1.9 s = 10.6 in flight by Little's law.
    rows = [(2.0, 2, 3, 0.6), (4.0, 8, 9, 1.4), (6.0, 16, 11, 1.7), (8.0, 27, 11, 1.85), (10.0, 38, 11, 1.9)]
    assert _samples(S.SaturationWatch(Slo({"ttft": 500.0}), 5.565), rows) == [None] * len(rows)


@pytest.mark.parametrize("rate", [23.7, 20.7])
def test_reported_gpu_steps_are_not_stopped(rate: float) -> None:
    # a fast GPU: steps at 23.7 and 20.7 req/s of ~0.28-s requests stopped "in-flight grew from 1 to 6 (8) in
    # 4.0 s"; Little's law says 23.7 x 0.28 = 6.6 in flight is what keeping up looks like
    rows = [
        (2.0, 3, 1, 0.2),
        (4.0, 40, 6, 0.27),
        (6.0, 88, 8, 0.28),
        (8.0, 135, 6, 0.28),
        (10.0, 182, 7, 0.28),
    ]
    assert _samples(S.SaturationWatch(Slo({"ttft": 500.0}), rate), rows) == [None] * len(rows)


def test_a_server_that_answers_half_is_stopped() -> None:
    # 10 req/s sent, 5 req/s answered in order (the first in 0.5 s): the request sent at a is answered at
    # 0.5 + 2a, so the requests answered by t averaged 0.5 + (t - 0.5) / 4 s while the latency of the ones answered
    # now is 0.5 + (t - 0.5) / 2: those sent over a mean latency ago pile up by 2.5 a second
    rows = [
        (t, round(5 * (t - 0.5)), round(10 * t - 5 * (t - 0.5)), 0.5 + (t - 0.5) / 4) for t in range(2, 21, 2)
    ]
    said = _samples(S.SaturationWatch(NO_SLO, 10.0), [(float(t), ok, n, w) for t, ok, n, w in rows])
    assert said[:3] == [None] * 3 and "over-saturated" in next(x for x in said if x)
    assert (
        said.index(next(x for x in said if x)) < 6
    )  # by 12 s: before the 200 requests' 20 s of arrivals end
