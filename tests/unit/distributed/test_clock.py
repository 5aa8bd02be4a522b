"""A worker's clock offset to the master (vllm_users.distributed.transport.clock): NTP's estimate from the round
trip with the least round-trip time, its error bounded by half that trip however the delays split, the warnings
on labelled cases, and its use: t0 converted to the worker's clock, records put on the master's."""

from __future__ import annotations

import random
from typing import Any

import gevent
import pytest

from vllm_users.distributed.transport import clock as C
from vllm_users.distributed.transport.messages import ClockPing, ClockReport, Ready, ToMaster
from vllm_users.distributed.transport.open_loop import OpenLoopSchedule
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.measure.record import RequestRecord
from vllm_users.options import Options, build


def _trip(t_send: float, theta: float, fwd: float, back: float) -> C.Probe:
    """A round trip to a master whose clock is `theta` ahead, `fwd` s out and `back` s home."""
    return C.Probe(t_send, t_send + fwd + back, t_send + fwd + theta)


def test_the_round_trip_with_the_least_rtt_is_kept() -> None:
    theta = 0.3
    probes = [
        _trip(100.0, theta, 0.040, 0.002),  # slow out: alone it would say theta + 19 ms
        _trip(101.0, theta, 0.0005, 0.0007),  # the fastest
        _trip(102.0, theta, 0.001, 0.030),  # slow home: theta - 14.5 ms
    ]
    est = C.estimate(probes)
    assert est is not None
    assert est.rtt_s == pytest.approx(0.0012) and est.uncertainty_s == pytest.approx(0.0006)
    assert est.offset_s == pytest.approx(theta - 0.0001)  # (fwd - back) / 2 off, no more
    assert est.probes == 3
    # the order does not matter: the fastest wins wherever it is
    assert C.estimate(probes[::-1]) == est


def test_asymmetric_delays_stay_within_half_the_round_trip() -> None:
    rng = random.Random(7)
    for _ in range(500):
        theta = rng.uniform(-5.0, 5.0)
        trips = [
            _trip(rng.uniform(0, 1e3), theta, rng.expovariate(1 / 0.01), rng.expovariate(1 / 0.01))
            for _ in range(8)
        ]
        est = C.estimate(trips)
        assert est is not None
        assert est.uncertainty_s == pytest.approx(min(p.rtt for p in trips) / 2)
        assert abs(est.offset_s - theta) <= est.uncertainty_s + 1e-9
    # all the delay on one side: the bound is reached, not passed
    one_sided = C.estimate([_trip(0.0, 1.0, 0.010, 0.0)])
    assert one_sided is not None and one_sided.offset_s == pytest.approx(1.0 + 0.005)
    assert one_sided.uncertainty_s == pytest.approx(0.005)


def test_no_answer_or_a_broken_stamp_is_no_estimate() -> None:
    assert C.estimate([]) is None
    assert C.estimate([C.Probe(10.0, 9.0, 50.0)]) is None  # received before sent: not a round trip
    est = C.estimate([C.Probe(10.0, 9.0, 50.0), C.Probe(10.0, 10.002, 12.001)])
    assert est is not None and est.offset_s == pytest.approx(2.0) and est.probes == 1


def _off(offset_ms: float, unc_ms: float = 0.2) -> C.Offset:
    return C.Offset(offset_ms / 1000, unc_ms / 1000, 2 * unc_ms / 1000, 8)


@pytest.mark.parametrize(
    ("applied", "new", "says"),
    [
        (
            None,
            _off(-2500.0),
            "+2500.0 ms",
        ),  # the first measurement: a skewed host is said (its clock ahead)...
        (None, _off(12.0), "-12.0 ms"),  # (the sign is the worker's clock's: here it is behind)
        (None, _off(3.0), None),  # ...a small offset is not
        (None, _off(-9.9), None),
        (_off(40.0), _off(40.0 + 4.0), None),  # drift within DRIFT_WARN_S: quiet
        (_off(40.0, 0.5), _off(40.0 + 5.8, 0.5), None),  # past 5 ms but within the uncertainties
        (_off(40.0, 0.5), _off(40.0 + 6.2, 0.5), "drifted +6.2 ms"),  # past both
        (_off(40.0), _off(40.0 - 9.0), "drifted -9.0 ms"),
        (_off(-2500.0), _off(-2500.3), None),  # a large offset that holds still: said once, at first
    ],
)
def test_the_warnings_on_labelled_cases(applied: C.Offset | None, new: C.Offset, says: str | None) -> None:
    said = C.offset_warning("h-w1", applied, new)
    if says is None:
        assert said is None
    else:
        assert said is not None and says in said and "h-w1" in said


class _Master:
    """A master over a fake wire: its clock is `theta` ahead of the worker's; each trip takes its own delays."""

    def __init__(self, theta: float, delays: list[tuple[float, float]]) -> None:
        self.theta, self.delays = theta, list(delays)
        self.clock: C.WorkerClock | None = None
        self.reports: list[ClockReport] = []

    def send(self, msg: ToMaster) -> None:
        if isinstance(msg, ClockReport):
            self.reports.append(msg)
        elif isinstance(msg, ClockPing) and self.delays:
            fwd, back = self.delays.pop(0)
            gevent.spawn_later(fwd, self._answer, msg.seq, back)

    def _answer(self, seq: int, back: float) -> None:
        t = C.local_now() + self.theta
        assert self.clock is not None
        gevent.spawn_later(back, self.clock.on_pong, seq, t)


def test_a_worker_measures_a_skewed_master_and_reports_it() -> None:
    m = _Master(-2.5, [(0.03, 0.001), (0.001, 0.001), (0.001, 0.02)] + [(0.01, 0.01)] * 5)
    clk = C.WorkerClock("h-w0", m.send, refresh_s=60.0)
    m.clock = clk
    assert clk.offset_s == 0.0 and clk.applied is None  # nothing measured: no correction
    clk.start()
    assert clk.settled.wait(5.0)
    est = clk.applied
    assert est is not None and est.probes == 8
    assert abs(est.offset_s - -2.5) <= est.uncertainty_s + 1e-6 and est.uncertainty_s < 0.01
    assert clk.master_now() == pytest.approx(C.local_now() - 2.5, abs=0.01)
    assert [(r.worker, r.offset_s, r.probes) for r in m.reports] == [("h-w0", est.offset_s, 8)]
    clk.stop()


def test_a_master_that_never_answers_costs_one_probe_timeout() -> None:
    m = _Master(1.0, [])
    clk = C.WorkerClock("h-w0", m.send, probe_timeout_s=0.05)
    m.clock = clk
    clk.start()
    assert clk.settled.wait(1.0)  # one unanswered probe, not eight
    assert clk.applied is None and clk.offset_s == 0.0 and m.reports == []
    clk.stop()


class _Measured(C.WorkerClock):
    """A clock already measured: the master is `offset_s` ahead."""

    def __init__(self, offset_s: float) -> None:
        super().__init__("w0", lambda m: None)
        self.applied = C.Offset(offset_s, 0.0002, 0.0004, 8)
        self.settled.set()


def test_t0_is_converted_to_the_workers_clock_and_tickets_stay_on_the_masters() -> None:
    o = build(request_rate=200.0, num_prompts=3, burstiness=float("inf"))
    sent: list[ToMaster] = []
    started: list[float] = []
    # this worker's clock is 2.5 s ahead of the master's: the master is -2.5 s from it
    s = OpenLoopSchedule(o, 0, 1, "w0", sent.append, lambda: 1, started.append, _Measured(-2.5))
    s.start()
    got: list[Any] = []
    user = gevent.spawn(lambda: [got.append(s.take()) for _ in range(3)])
    s.on_spawned()
    gevent.sleep(0.05)
    assert sent == [Ready("w0", 1)]
    t0_master = C.local_now() - 2.5 + 0.05
    s.on_t0(t0_master)
    user.join(timeout=5)
    assert started == [pytest.approx(t0_master + 2.5)]  # the start, on this worker's clock
    assert [t.t_intended for t in got] == pytest.approx([t0_master, t0_master + 0.005, t0_master + 0.01])
    s.stop()


def test_a_schedule_waits_for_the_clock_before_it_says_ready() -> None:
    o = build(request_rate=200.0, num_prompts=3, burstiness=float("inf"))
    sent: list[ToMaster] = []
    clk = C.WorkerClock("w0", lambda m: None)  # never measured yet
    s = OpenLoopSchedule(o, 0, 1, "w0", sent.append, lambda: 1, lambda t: None, clk)
    s.start()
    user = gevent.spawn(s.take)
    s.on_spawned()
    gevent.sleep(0.1)
    assert sent == []  # every user waits, but the offset is not known: t0 could not be converted
    clk.settled.set()
    gevent.sleep(0.1)
    assert sent == [Ready("w0", 1)]
    s.stop()
    user.kill()


def test_records_leave_a_worker_on_the_masters_clock() -> None:
    ctx = WorkerContext(Options(), 0, 1, lambda m: None, measure_clock=True)
    assert ctx.clock is not None
    ctx.clock.applied = C.Offset(-2.5, 0.0002, 0.0004, 8)
    rec = RequestRecord("chat", "w", 0, 1, "chat", 1000.0 + 2.5, t_intended=1000.0, chunk_times_us=[5])
    ctx.submit(rec)
    assert rec.t_start == pytest.approx(1000.0) and rec.t_intended == 1000.0  # sent on time, on one axis
    b = ctx.take_batch()
    assert '"t_start":1000.0' in b.records
    assert b.sent_at is not None and b.sent_at == pytest.approx(C.local_now() - 2.5, abs=0.5)
    local = WorkerContext(Options(), 0, 1, lambda m: None)  # a local run: one clock, nothing converted
    assert local.clock is None
    rec2 = RequestRecord("chat", "w", 0, 2, "chat", 1002.5, t_intended=1000.0, chunk_times_us=[5])
    local.submit(rec2)
    assert rec2.t_start == 1002.5


def test_refreshes_report_the_drift_and_keep_the_first_offset() -> None:
    m = _Master(0.200, [(0.001, 0.001)] * 16)
    clk = C.WorkerClock("h-w0", m.send, probes=8, refresh_s=0.05)
    m.clock = clk
    clk.start()
    assert clk.settled.wait(5.0)
    m.theta = 0.230  # the master's clock gained 30 ms on this one
    for _ in range(100):
        if len(m.reports) >= 2:
            break
        gevent.sleep(0.02)
    clk.stop()
    assert len(m.reports) == 2
    first, second = m.reports
    assert clk.applied is not None and clk.applied.offset_s == first.offset_s  # one offset for the run
    assert abs(first.offset_s - 0.200) <= first.uncertainty_s + 1e-6
    assert abs(second.offset_s - 0.230) <= second.uncertainty_s + 1e-6


def test_the_master_keeps_each_workers_first_offset_and_says_a_drift_once(caplog: Any) -> None:
    from types import SimpleNamespace

    from vllm_users.distributed.master_plugin import MasterPlugin

    master: Any = SimpleNamespace(clocks={}, _drift_said=set())
    with caplog.at_level("WARNING", logger="vllm_locust"):
        for off in (-2.5, -2.5001, -2.490, -2.480):
            MasterPlugin.on_clock_report(master, ClockReport("h-w1", off, 0.0002, 0.0004, 8))
        MasterPlugin.on_clock_report(master, ClockReport("h-w0", 0.0003, 0.0002, 0.0004, 8))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "+2500.0 ms off" in said[0] and "drifted +10.0 ms" in said[1], said
    applied, latest = master.clocks["h-w1"]
    assert C.as_meta(latest, applied) == {
        "offset_ms": -2500.0,
        "uncertainty_ms": 0.2,
        "rtt_ms": 0.4,
        "probes": 8,
        "latest_offset_ms": -2480.0,
        "drift_ms": 20.0,
    }
    assert set(master.clocks) == {"h-w0", "h-w1"}
