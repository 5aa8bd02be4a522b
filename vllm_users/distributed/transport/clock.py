"""A worker's clock offset to the master's wall clock, measured as NTP does.

Workers on other hosts stamp records on their own clock while the master agrees the open-loop schedule's t0 and
samples the server's metrics on its clock; a skewed worker clock would start the schedule early or late and put
its records off the master's time axis. Each worker sends `PROBES` pings; the master answers each with its wall
clock at receipt. Of the round trips, the one with the least round-trip time bounds the offset best: with send
and receive stamps t1, t4 on the worker and the master's stamp t on the way, offset = t − (t1 + t4)/2, and
however the trip splits between the two directions the error is at most (t4 − t1)/2, its uncertainty.

The worker's clock here is the one its records use (`measure.record.epoch`: a wall-clock anchor taken once,
advanced by perf_counter), so a step of the worker's wall clock during the run cannot move it off its records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.event

from vllm_users.distributed.transport.messages import ClockPing, ClockReport, ToMaster
from vllm_users.measure.record import epoch

__all__ = [
    "DRIFT_WARN_S",
    "OFFSET_WARN_S",
    "PROBES",
    "PROBE_TIMEOUT_S",
    "REFRESH_S",
    "SETTLE_WAIT_S",
    "Offset",
    "Probe",
    "WorkerClock",
    "as_meta",
    "estimate",
    "local_now",
    "offset_warning",
]

log = logging.getLogger("vllm_locust")

PROBES = 8  # round trips per measurement; the one with the least round-trip time is kept
PROBE_TIMEOUT_S = (
    0.5  # an unanswered ping is given up after this long (a master without the kind never answers)
)
REFRESH_S = 15.0  # during the run the offset is measured again this often, to see drift
SETTLE_WAIT_S = (
    5.0  # the first requests (the open-loop schedule's ready) wait this long at most for the offset
)
OFFSET_WARN_S = 0.010  # an offset past this is said (it is corrected, but the host's clock wants NTP)
DRIFT_WARN_S = 0.005  # a later measurement this far from the applied one, past both uncertainties, is said


def local_now() -> float:
    """This process's clock as its records stamp it (epoch seconds from perf_counter)."""
    return epoch(time.perf_counter())


@dataclass(frozen=True, slots=True)
class Probe:
    """One round trip: sent and answered on the worker's clock, `t_master` stamped by the master meanwhile."""

    t_send: float
    t_recv: float
    t_master: float

    @property
    def rtt(self) -> float:
        """Round-trip time, seconds."""
        return self.t_recv - self.t_send


@dataclass(frozen=True, slots=True)
class Offset:
    """master clock − worker clock, seconds, within ± `uncertainty_s` (half the kept round trip)."""

    offset_s: float
    uncertainty_s: float
    rtt_s: float
    probes: int  # round trips answered

    def to_master(self, t_local: float) -> float:
        """A time on the worker's clock, on the master's."""
        return t_local + self.offset_s

    def to_local(self, t_master: float) -> float:
        """A time on the master's clock, on the worker's."""
        return t_master - self.offset_s


def estimate(probes: Sequence[Probe]) -> Offset | None:
    """NTP's estimate from the round trip with the least round-trip time; None without an answered probe."""
    good = [p for p in probes if p.rtt >= 0]  # a negative trip is a broken stamp, not a fast one
    if not good:
        return None
    best = min(good, key=lambda p: p.rtt)
    return Offset(
        offset_s=best.t_master - (best.t_send + best.t_recv) / 2,
        uncertainty_s=best.rtt / 2,
        rtt_s=best.rtt,
        probes=len(good),
    )


def offset_warning(worker: str, applied: Offset | None, new: Offset) -> str | None:
    """What to say about `worker`'s new measurement: a large first offset, or a drift from the applied one."""
    if applied is None:
        if abs(new.offset_s) > OFFSET_WARN_S:
            return (
                f"worker {worker}'s clock is {-new.offset_s * 1000:+.1f} ms off the master's "
                f"(± {new.uncertainty_s * 1000:.2f} ms); its schedule and records are put on the master's clock "
                f"(sync the hosts' clocks with NTP)"
            )
        return None
    drift = new.offset_s - applied.offset_s
    if abs(drift) > DRIFT_WARN_S + new.uncertainty_s + applied.uncertainty_s:
        return (
            f"worker {worker}'s clock drifted {drift * 1000:+.1f} ms from the master's since the run started "
            f"(± {(new.uncertainty_s + applied.uncertainty_s) * 1000:.2f} ms); its records' times are that far off"
        )
    return None


class WorkerClock:
    """A worker's offset to the master: measured at start, then every REFRESH_S; the first one is applied.

    One offset serves the whole run, so the schedule's intended times and the records' send times share one axis
    and the schedule's lag stays a difference on one clock; later measurements go to the master, which keeps the
    drift and says when it grows."""

    def __init__(
        self,
        worker: str,
        send: Callable[[ToMaster], None],
        probes: int = PROBES,
        refresh_s: float = REFRESH_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        self.worker = worker
        self.send = send
        self.probes, self.refresh_s, self.probe_timeout_s = probes, refresh_s, probe_timeout_s
        self.applied: Offset | None = None  # the first measurement; None: not measured (offset 0)
        self.latest: Offset | None = None
        self.settled = gevent.event.Event()  # the first measurement is over (answered or not)
        self._seq = 0
        self._sent_at = 0.0
        self._answer: Probe | None = None
        self._answered = gevent.event.Event()
        self._greenlet: gevent.Greenlet | None = None

    @property
    def offset_s(self) -> float:
        """The applied offset (master − worker), 0.0 while none was measured."""
        return self.applied.offset_s if self.applied is not None else 0.0

    def master_now(self) -> float:
        """Now on the master's clock."""
        return local_now() + self.offset_s

    def start(self) -> None:
        """Measure now, then every refresh_s until stopped."""
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """No more measurements."""
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
        self.settled.set()

    def wait_settled(self, timeout: float = SETTLE_WAIT_S) -> None:
        """Block until the first measurement is over (at most `timeout` s)."""
        if not self.settled.wait(timeout):
            log.warning("vllm-locust: no clock offset to the master within %.0f s; starting anyway", timeout)

    def _run(self) -> None:
        try:
            self.measure()
        finally:
            self.settled.set()
        if self.applied is None:
            log.warning(
                "vllm-locust: the master answered no clock probe; this worker's times stay on its own clock"
            )
            return  # a master that does not answer the kind will not later either
        while True:
            gevent.sleep(self.refresh_s)
            self.measure()

    def measure(self) -> Offset | None:
        """One measurement of PROBES round trips, reported to the master; the first one is applied."""
        found: list[Probe] = []
        for _ in range(self.probes):
            p = self._probe()
            if p is not None:
                found.append(p)
            elif not found:
                break  # the first one unanswered: a master that does not know the kind (or is not there)
        est = estimate(found)
        if est is None:
            return None
        self.latest = est
        if self.applied is None:
            self.applied = est
        self.send(ClockReport(self.worker, est.offset_s, est.uncertainty_s, est.rtt_s, est.probes))
        return est

    def _probe(self) -> Probe | None:
        self._seq += 1
        self._answer = None
        self._answered.clear()
        self._sent_at = local_now()
        self.send(ClockPing(self.worker, self._seq))
        if not self._answered.wait(self.probe_timeout_s):
            return None
        return self._answer

    def on_pong(self, seq: int, t_master: float) -> None:
        """The master's answer to ping `seq`, stamped `t_master` on its clock (a late answer is ignored)."""
        t_recv = local_now()
        if seq == self._seq and self._answer is None:
            self._answer = Probe(self._sent_at, t_recv, t_master)
            self._answered.set()


def as_meta(latest: Offset, applied: Offset) -> dict[str, Any]:
    """One worker's entry in result.json's meta.clock_offsets (milliseconds)."""
    return {
        "offset_ms": round(applied.offset_s * 1000, 3),
        "uncertainty_ms": round(applied.uncertainty_s * 1000, 3),
        "rtt_ms": round(applied.rtt_s * 1000, 3),
        "probes": applied.probes,
        "latest_offset_ms": round(latest.offset_s * 1000, 3),
        "drift_ms": round((latest.offset_s - applied.offset_s) * 1000, 3),
    }
