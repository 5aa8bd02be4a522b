"""One worker's share of the open-loop arrival schedule: Tickets put into a queue, due at t0 + offset.

The schedule's clock starts only once every user is set up, so that no arrival waits for a user to spawn or
to finish its setup (model lookup, calibration, a tokenizer, a dataset: arrivals that waited for it would be
measured late for the client's sake, not the server's). Each worker tells the master when all of its users wait
for a ticket (`messages.Ready`); once every worker has, the master sends one t0 to all of them (`messages.T0`),
a little ahead, so the global schedule stays split across workers as before.

t0 is on the master's clock; a worker on another host converts it with its measured offset (clock.py) before it
plans, and reports ready only once that offset is measured. The tickets' intended times stay on the master's
clock, the axis the records are put on (WorkerContext.submit).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import gevent
import gevent.event
from gevent.queue import Empty, Queue

from vllm_users.distributed.transport.clock import SETTLE_WAIT_S, WorkerClock
from vllm_users.distributed.transport.messages import Ready, ToMaster
from vllm_users.measure.record import epoch
from vllm_users.options import Options
from vllm_users.workload.arrivals import worker_piecewise
from vllm_users.workload.ramp import ramp_worker_iter
from vllm_users.workload.ticket import Ticket
from vllm_users.workload.trace_schedule import plan_of, worker_trace_iter

__all__ = ["READY_POLL_S", "T0_WAIT_S", "USERS_READY_WAIT_S", "OpenLoopSchedule"]

log = logging.getLogger("vllm_locust")

READY_POLL_S = 0.02  # how often the dispatcher checks whether every user waits for a ticket
# users still not all waiting this long after spawning completed (one crashed in on_start, a custom user that
# never asks for tickets): the worker reports ready anyway, and late users find their arrivals late
USERS_READY_WAIT_S = 60.0
T0_WAIT_S = 30.0  # ready but no t0 from the master this long after: the worker starts on its own clock


class OpenLoopSchedule:
    """Dispatches this worker's arrivals into a queue from an agreed t0; users take them with `take`."""

    def __init__(
        self,
        options: Options,
        index: int,
        count: int,
        worker: str,
        send: Callable[[ToMaster], None],
        users: Callable[[], int],
        on_t0: Callable[[float], None],
        clock: WorkerClock | None = None,
    ) -> None:
        self.options = options
        self.index, self.count, self.worker = index, count, worker
        self.send = send
        self.users = users  # how many users this worker runs now
        self._on_t0 = (
            on_t0  # called with the agreed t0 (this worker's clock) just before the first arrival is planned
        )
        self.clock = clock  # the offset to the master's clock (None: a local run, one clock)
        self.queue: Queue = Queue()
        # the global schedule's rate segments [(offset s, rate)]; changed live from the master
        self.segments: list[tuple[float, float]] = [(0.0, float(options.load.request_rate or 0.0))]
        self._replan = gevent.event.Event()
        self._last_index = -1
        self.t0: float | None = None  # the master's clock; None until agreed
        self._t0_event = gevent.event.Event()
        self._waiting: set[int] = set()  # users (greenlet ids) that asked for a ticket before t0
        self.spawned_at: float | None = None  # perf_counter when spawning completed (Locust's event)
        self.ready_sent = False
        self.stopping = False
        self.greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        """Start the dispatcher: it waits for t0, then puts each arrival into the queue when it is due."""
        self.greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """No more arrivals (the run is stopping)."""
        self.stopping = True
        if self.greenlet is not None:
            self.greenlet.kill(block=False)

    # ----- readiness and t0 -----
    def on_spawned(self) -> None:
        """Locust finished spawning every user of the run (its spawning_complete event)."""
        if self.spawned_at is None:
            self.spawned_at = time.perf_counter()

    def on_t0(self, t0: float) -> None:
        """The master agreed the schedule's start (its clock)."""
        if self.t0 is None:
            self.t0 = t0
            self._t0_event.set()

    def _users_ready(self) -> bool:
        return self.spawned_at is not None and len(self._waiting) >= self.users()

    def _clock_ready(self) -> bool:
        """The offset to the master is measured (or given up on): t0 can be converted once it comes."""
        if self.clock is None or self.clock.settled.is_set():
            return True
        return self.spawned_at is not None and time.perf_counter() - self.spawned_at > SETTLE_WAIT_S

    def _master_now(self) -> float:
        return self.clock.master_now() if self.clock is not None else time.time()

    def _await_t0(self) -> float | None:
        """Report ready once every user waits for a ticket; the agreed t0, or None when stopping first."""
        ready_at = 0.0
        while not self.stopping:
            if not self.ready_sent:
                late = (
                    self.spawned_at is not None and time.perf_counter() - self.spawned_at > USERS_READY_WAIT_S
                )
                if (self._users_ready() or late) and self._clock_ready():
                    if late:
                        log.warning(
                            "vllm-locust: %d of %d users set up %.0f s after spawning; the schedule starts "
                            "anyway",
                            len(self._waiting),
                            self.users(),
                            USERS_READY_WAIT_S,
                        )
                    self.ready_sent, ready_at = True, time.perf_counter()
                    self.send(Ready(self.worker, len(self._waiting)))
            elif time.perf_counter() - ready_at > T0_WAIT_S:
                log.error(
                    "vllm-locust: no schedule start from the master %.0f s after ready; starting now",
                    T0_WAIT_S,
                )
                self.on_t0(self._master_now())
            if self._t0_event.wait(READY_POLL_S):
                return self.t0
        return None

    # ----- the schedule -----
    def set_segments(self, segments: list[list[float]]) -> None:
        """The master changed the request rate: re-plan this worker's share of the global schedule."""
        self.segments = [(float(t), float(r)) for t, r in segments]
        self._replan.set()

    def _run(self) -> None:
        t0_master = self._await_t0()
        if t0_master is None:
            return
        t0_local = self.clock.applied.to_local(t0_master) if self.clock and self.clock.applied else t0_master
        self._on_t0(t0_local)
        # convert the origin to this process's perf_counter once (through the records' clock: a step of the wall
        # clock since start moves neither); sleeps then use perf_counter
        now = time.perf_counter()
        t0_perf = now + (t0_local - epoch(now))
        try:
            while not self._plan(t0_master, t0_perf):  # False: the rate changed, start over from the new plan
                pass
        except Exception:
            log.exception("vllm-locust: arrival schedule failed")
            raise
        self.queue.put(None)

    def _plan(self, t0_master: float, t0_perf: float) -> bool:
        """Dispatch this worker's arrivals under the current segments; False when they changed meanwhile."""
        o, q = self.options, self.queue
        self._replan.clear()
        arrivals = (
            worker_trace_iter(
                plan_of(o.trace, o.load.num_prompts), o.trace.time_scale, self.index, self.count
            )
            if o.trace.trace  # --trace: each request at its own offset (live rate changes do not apply)
            else ramp_worker_iter(
                o.load.ramp_up_strategy,
                o.load.ramp_up_start_rps or 0.0,
                o.load.ramp_up_end_rps or 0.0,
                o.load.burstiness,
                o.request.seed,
                o.load.num_prompts or 0,
                self.index,
                self.count,
            )
            if o.load.ramp_up_strategy  # a ramp has its own rates: live rate changes do not apply
            else worker_piecewise(
                self.segments,
                o.load.burstiness,
                o.request.seed,
                o.load.num_prompts or None,
                self.index,
                self.count,
            )
        )
        for i, off in arrivals:
            if i <= self._last_index:  # sent under the previous plan (identical before the change)
                continue
            delay = t0_perf + off - time.perf_counter()
            if delay > 0 and self._replan.wait(delay):
                return False
            if self.stopping:
                return True
            q.put(Ticket(i, t0_master + off))
            self._last_index = i
        return True

    # ----- the users' side -----
    def take(self) -> Ticket | None:
        """Block until this worker's next arrival is due; None at the end of the schedule or when stopping."""
        if self.t0 is None:
            self._waiting.add(id(gevent.getcurrent()))  # this user is set up and waits: see _users_ready
        while not self.stopping:
            try:
                t = self.queue.get(timeout=0.5)
            except Empty:
                continue
            if t is None:
                self.queue.put(None)  # let every other user see the end too
                return None
            ticket: Ticket = t
            return ticket
        return None

    def finished(self) -> bool:
        """Every arrival of this worker's share was taken."""
        return self.greenlet is not None and self.greenlet.dead and self.queue.qsize() <= 1

    def backlog(self) -> int:
        """Arrivals due but not yet taken by a user."""
        n: int = self.queue.qsize()
        return n

    def due_untaken(self, now: float) -> list[float]:
        """Empty the queue; the intended times of the arrivals in it that were due by `now` (never sent; both on
        the master's clock)."""
        out: list[float] = []
        while True:
            try:
                t = self.queue.get_nowait()
            except Empty:
                break
            if t is not None and t.t_intended is not None and t.t_intended <= now:
                out.append(t.t_intended)
        return out
