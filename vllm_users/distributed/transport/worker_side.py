"""Per-process run state on a worker: the request budget or arrival schedule, records, histograms, drain.

A worker of a master (not a local run) measures its clock's offset to the master's (clock.py) before its first
request, and every wall-clock time it sends is on the master's clock: a record's t_start is converted in
`submit` (its t_intended, from the schedule, already is), a batch's sent_at when it is built."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import gevent
import gevent.lock
from gevent.queue import Empty, Queue

from vllm_users import run_dir
from vllm_users.distributed.transport.clock import WorkerClock, local_now
from vllm_users.distributed.transport.live_totals import LiveTotals
from vllm_users.distributed.transport.messages import Batch, Done, First, Need, ToMaster
from vllm_users.distributed.transport.open_loop import OpenLoopSchedule
from vllm_users.measure.columns import pack_records
from vllm_users.measure.health import HealthSampler
from vllm_users.measure.histograms import HistogramSet
from vllm_users.measure.metrics import Slo
from vllm_users.measure.per_class import class_slo
from vllm_users.measure.record import RequestRecord, dropped_record, parse_lines
from vllm_users.options import Options
from vllm_users.workload.ticket import Ticket

log = logging.getLogger("vllm_locust")

BATCH_INTERVAL_S = 1.0  # records and histograms go to the master every second (bounds loss on a kill)
END_CHUNK_RECORDS = 20_000  # --records-at-end: records per message when the local file is sent at the end


def _yield() -> None:
    gevent.sleep(0)


def _packed(recs: list[RequestRecord]) -> bytes | None:
    """The records packed as columns; None when packing failed (the master converts the JSON lines instead)."""
    try:
        return pack_records(recs)
    except Exception:
        log.exception("vllm-locust: packing record columns failed")
        return None


class WorkerContext:
    """Everything a worker process shares between its users."""

    def __init__(
        self,
        options: Options,
        worker_index: int,
        worker_count: int,
        send: Callable[[ToMaster], None],
        measure_clock: bool = False,
    ):
        self.options = options
        self.calibration: dict[str, Any] | None = (
            None  # how prompt lengths were calibrated (sent to the master)
        )
        self.first_sent_at: float | None = (
            None  # wall time of this worker's first load request (told the master)
        )
        self.index = worker_index
        self.count = max(1, worker_count)
        self.name = f"{socket.gethostname()}-w{worker_index}"
        self.send = send
        # a worker of a master: its offset to the master's clock (None: a local run, the master's own clock)
        self.clock = WorkerClock(self.name, send) if measure_clock else None
        self._clock_waited = False
        self.hists = HistogramSet()
        self.health = HealthSampler()
        self.pending: list[str] = []
        self.pending_recs: list[RequestRecord] = []  # packed as columns per batch (records.parquet)
        self.record_count = 0
        slo = Slo.parse([options.measure.goodput]) if options.measure.goodput else None
        table = [asdict(c) for c in options.classes.vllm_classes]
        self.live = LiveTotals(slo, {str(t["name"]): class_slo(t, slo) for t in table})
        self.user_errors: list[
            dict[str, Any]
        ] = []  # exceptions user code raised (user_errors.py), in the totals
        self.seq = 0
        self.inflight: set[gevent.Greenlet] = set()
        self.open_sessions = (
            0  # tickets whose flow is running (a multi-request session thinks between requests)
        )
        self.stopping = False
        self.final_sent = False
        self.done_sent = False
        self.schedule: OpenLoopSchedule | None = None  # open loop: this worker's share of the arrivals
        self._reporter: gevent.Greenlet | None = None
        self._batch_lock = gevent.lock.Semaphore()
        self._next_index = worker_index
        self._budget = options.load.num_prompts or 0
        # closed loop with a request budget: tickets come from the master in small grants, so a worker
        # that starts late, or has fewer users, simply takes fewer (no fixed per-worker share)
        self._grants: Queue | None = None
        self._asked_at = 0.0
        self._exhausted = False
        self.users: Callable[[], int] = lambda: 1
        # --records-at-end: batches carry histograms and counters only; the records stay in the local file
        # (from _file_start on) and go to the master in chunks when the worker drains
        self.records_at_end = options.measure.records_at_end
        self._local_first = options.measure.records_at_end  # the drain sends the local file (what reached it)
        self.write_error: str | None = None  # the local file's write that failed (a full disk): in the totals
        self._file = self._open_local_file()
        self._local_path: str | None = self._file.name if self._file is not None else None
        self._file_start = self._file.tell() if self._file is not None else 0

    # ----- request budget / schedule -----
    def start(self) -> None:
        """Begin the clock's measurement, the schedule (open loop), health sampling and periodic reports."""
        if self.clock is not None:
            self.clock.start()
        if self.options.open_loop:
            # health sampling starts with the schedule (t0), not with the users' setup
            self.schedule = OpenLoopSchedule(
                self.options,
                self.index,
                self.count,
                self.name,
                self.send,
                lambda: self.users(),
                self._schedule_started,
                self.clock,
            )
            self.schedule.start()
        else:
            self.health.start()
            if self._budget:
                self._grants = Queue()
        self._reporter = gevent.spawn(self._report_loop)

    def _schedule_started(self, t0: float) -> None:
        wait = max(0.0, t0 - local_now())  # the run (CPU and loop probes) starts at t0 (this worker's clock)
        self.health.start(warmup_s=wait, run_starts_in_s=wait)

    def next_ticket(self) -> Ticket | None:
        """Block until this worker may send its next request; None when its share is used up or stopping."""
        if self.stopping:
            return None
        if self.clock is not None and not self._clock_waited:
            # no record before the offset is known: every record of the run is on the master's clock
            self._clock_waited = True
            self.clock.wait_settled()
        if self.schedule is not None:
            return self.schedule.take()
        if self._grants is not None:
            return self._granted_ticket(self._grants)
        t = Ticket(self._next_index)
        self._next_index += self.count
        return t

    def _granted_ticket(self, grants: Queue) -> Ticket | None:
        while not self.stopping:
            if grants.qsize() <= self.users() and not self._exhausted:
                self._ask()
            try:
                t = grants.get(timeout=0.5)
            except Empty:
                continue
            if t is None:
                grants.put(None)  # every other user sees the end too
                return None
            ticket: Ticket = t
            return ticket
        return None

    def _ask(self) -> None:
        now = time.time()
        if now - self._asked_at < 2.0:  # one request in flight; re-ask if a grant never came
            return
        self._asked_at = now
        self.send(Need(self.name, max(1, self.users())))

    def on_grant(self, start: int, count: int) -> None:
        """The master granted tickets [start, start+count); count 0 means the budget is used up."""
        assert self._grants is not None
        self._asked_at = 0.0
        if count <= 0:
            if (
                not self._exhausted
            ):  # one end marker: a re-ask answered late gives a second "0" (qsize must stay 1)
                self._exhausted = True
                self._grants.put(None)
            return
        for i in range(start, start + count):
            self._grants.put(Ticket(i))

    def set_segments(self, segments: list[list[float]]) -> None:
        """The master changed the request rate: re-plan this worker's share of the global schedule."""
        if self.schedule is not None:
            self.schedule.set_segments(segments)

    def on_spawned(self) -> None:
        """Locust finished spawning the run's users (open loop: the schedule waits for their setup next)."""
        if self.schedule is not None:
            self.schedule.on_spawned()

    def on_t0(self, t0: float) -> None:
        """The master agreed the open-loop schedule's start (its clock)."""
        if self.schedule is not None:
            self.schedule.on_t0(t0)

    def on_clock_pong(self, seq: int, t_master: float) -> None:
        """The master answered a clock probe."""
        if self.clock is not None:
            self.clock.on_pong(seq, t_master)

    def master_now(self) -> float:
        """Now on the master's clock (this process's own in a local run)."""
        return self.clock.master_now() if self.clock is not None else time.time()

    def first_request(self) -> None:
        """A load request is about to go out: the first one is told to the master at once (--run-time counts from
        the run's first load request, not from the spawn: start-up and calibration are not the window's)."""
        if self.first_sent_at is None:
            self.first_sent_at = self.master_now()
            self.send(First(self.name, self.first_sent_at))

    # ----- records -----
    def next_seq(self) -> int:
        """A per-worker request sequence number."""
        self.seq += 1
        return self.seq

    def submit(self, rec: RequestRecord) -> None:
        """Keep a finished record: histograms, local file, and the batch for the master."""
        if self.clock is not None and self.clock.applied is not None:
            rec.t_start = self.clock.applied.to_master(rec.t_start)  # t_intended is the master's already
        self.hists.add_record(rec)
        self.live.count(rec)
        line = rec.to_json()
        self.record_count += 1
        if self.records_at_end and self._to_local(line + "\n"):
            return  # --records-at-end: kept in the local file only, sent at the drain
        self.pending.append(line)
        self.pending_recs.append(rec)
        if not self.records_at_end:
            self._to_local(line + "\n")

    def _to_local(self, text: str | None) -> bool:
        """Append `text` to the local records file (None: flush it); False when there is none or it failed. A
        failed write (a full disk) closes the file and is said once: the batches carry the records from then on,
        and the master, told in the totals, stops the run."""
        if self._file is None:
            return False
        try:
            if text is None:
                self._file.flush()
            else:
                self._file.write(text)
            return True
        except OSError as e:
            self.write_error = f"writing {self._file.name} failed: {e.strerror or e}"
            log.error("vllm-locust: %s; the records go on to the master", self.write_error)
            self.records_at_end = False
            try:
                self._file.close()
            except OSError:  # the buffer it could not write: that is the error above
                pass
            self._file = None
            return False

    def _totals_now(self) -> dict[str, Any]:
        totals = self.live.snapshot()
        totals["inflight"] = len(self.inflight)
        totals["backlog"] = self.schedule.backlog() if self.schedule is not None else 0
        if self.user_errors:
            totals["user_errors"] = [dict(k) for k in self.user_errors]
        if self.write_error:
            totals["write_error"] = self.write_error
        return totals

    def _open_local_file(self) -> Any:
        d = os.environ.get("VLLM_LOCUST_WORKER_DIR") or (
            run_dir.path(self.options.handoff.results_dir, run_dir.WORKERS_DIR)
            if self.options.handoff.results_dir
            else ""
        )
        if not d and self.records_at_end:
            d = tempfile.mkdtemp(prefix="vllm-locust-records-")  # the records must be kept somewhere
        if not d:
            return None
        os.makedirs(d, exist_ok=True)
        return open(os.path.join(d, run_dir.worker_records(self.name, os.getpid())), "a", buffering=1 << 16)

    def take_batch(self, final: bool = False, pause: Callable[[], None] = lambda: None) -> Batch:
        """Records, histograms and health gathered since the last batch. What it takes is swapped out first;
        `pause` runs between the steps that cost ~1 ms each (the report loop yields there: in one piece the
        batch held the event loop long enough to read the streams' chunks late)."""
        recs, lines, hists = self.pending_recs, self.pending, self.hists
        self.pending, self.pending_recs, self.hists = [], [], HistogramSet()  # submit() fills these meanwhile
        group_hists = self.live.take_hists()  # only the groupings the run has: classes, endpoints, replicas
        health, calibration, total, totals = (
            self.health.take(),
            self.calibration,
            self.record_count,
            self._totals_now(),
        )
        cols: bytes | None = None
        if recs:
            pause()
            cols = _packed(recs)
        encoded = hists.encode(pause)
        encoded_groups = {k: h.encode(pause) for k, h in group_hists.items()}
        classes = encoded_groups.pop("classes", None)  # runs with classes only
        pause()
        self._to_local(None)
        return self._batch(
            lines,
            cols,
            encoded,
            health,
            total,
            totals,
            final=final,
            calibration=calibration,
            class_hists=classes,
            group_hists=encoded_groups or None,
        )

    def _batch(
        self,
        lines: list[str],
        cols: bytes | None,
        hists: dict[str, str],
        health: dict[str, list[float]],
        total: int,
        totals: dict[str, Any],
        **rest: Any,
    ) -> Batch:
        """The one place a batch is built: these records (JSON lines and columns) with this worker's counts."""
        return Batch(
            worker=self.name,
            n=len(lines),
            records="\n".join(lines),
            hists=hists,
            health=health,
            total=total,
            totals=totals,
            sent_at=self.master_now(),
            cols=cols,
            **rest,
        )

    def send_local_records(self) -> int:
        """--records-at-end: the local file's records of this run, to the master in chunks; how many sent."""
        if self._local_path is None:
            return 0
        self._to_local(None)
        sent = 0
        with open(self._local_path, encoding="utf-8", errors="replace") as fh:
            fh.seek(self._file_start)
            while True:
                lines = [ln.rstrip("\n") for ln in itertools.islice(fh, END_CHUNK_RECORDS)]
                lines = [ln for ln in lines if ln]
                if not lines:
                    break
                recs, _torn = parse_lines(lines)
                self.send(self._batch(lines, _packed(recs), {}, {}, self.record_count, self._totals_now()))
                sent += len(lines)
                gevent.sleep(0)  # let heartbeats through between chunks
        return sent

    def _report_loop(self) -> None:
        while not self.final_sent:
            gevent.sleep(BATCH_INTERVAL_S)
            with self._batch_lock:  # the final batch (drain) comes after this one, never before
                if self.final_sent:
                    return
                # built in steps with a yield between them: in one piece it held the loop 3-5 ms a second at
                # 128 streams (chunks read late, TTFT off by as much); each step is ~1 ms
                self.send(self.take_batch(pause=_yield))
            if self._share_finished() and not self.done_sent:
                self.done_sent = True
                self.send(Done(self.name))

    def _share_finished(self) -> bool:
        if self.inflight or self.open_sessions:
            return False
        if self.schedule is not None:
            return self.schedule.finished()
        return self._grants is not None and self._exhausted and self._grants.qsize() <= 1

    # ----- stop -----
    def drain(self, timeout: float) -> None:
        """Stop sending, give in-flight streams `timeout` s, interrupt the rest, send the final batch."""
        if self.final_sent:
            return
        self.stopping = True
        if self.clock is not None:
            self.clock.stop()
        if self.schedule is not None:
            self.schedule.stop()
        self._record_dropped()
        deadline = time.perf_counter() + timeout
        while self.inflight and time.perf_counter() < deadline:
            gevent.sleep(0.05)
        for g in list(self.inflight):
            g.kill(block=True, timeout=2)  # the user records the request as interrupted
        self.health.stop()
        with self._batch_lock:
            if self.final_sent:  # another drain (the master's stop and the watchdog) sent it meanwhile
                return
            self.final_sent = True
            if self._local_first:
                n = self.send_local_records()
                log.info("vllm-locust: sent %d records kept locally (--records-at-end)", n)
            self.send(self.take_batch(final=True))
        if self._to_local(None) and self._file is not None:
            self._file.close()
            self._file = None

    def _record_dropped(self) -> None:
        """Open loop: arrivals already due but never sent become `dropped` records."""
        if self.schedule is None:
            return
        for t_intended in self.schedule.due_untaken(self.master_now()):
            self.submit(dropped_record(self.name, self.next_seq(), t_intended))
