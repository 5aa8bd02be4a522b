"""The master's (or local runner's) side of a run: collect batches, grant the request budget, watch workers,
drain on stop, write the run directory once on quit (or when the web UI's test stops).

One `MasterPlugin` per master process, created by the plugin's init listener (vllm_users.distributed.plugin).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_MISSING, MasterRunner

from vllm_users import exit_codes, run_dir
from vllm_users.atomic import atomic_json
from vllm_users.distributed import env_state
from vllm_users.distributed.env_state import context_or_none, locust_option, options
from vllm_users.distributed.failure_watch import TotalFailure
from vllm_users.distributed.run_end import (
    final_result,
    interruption,
    locust_html_report,
    note_faults,
    run_meta,
    start_profile,
    stop_profile,
    with_fault_warnings,
)
from vllm_users.distributed.server_profile import ServerProfile
from vllm_users.distributed.transport import messages
from vllm_users.distributed.transport.clock import Offset, as_meta, offset_warning
from vllm_users.distributed.transport.master_side import SILENT_WORKER_S, Collector
from vllm_users.distributed.views import web_ui
from vllm_users.distributed.views.live import LiveView
from vllm_users.measure.run_result import RunResult, save_result

__all__ = [
    "ABANDON_RUN_S",
    "FIRST_REQUEST_WAIT_S",
    "RATE_CHANGE_LEAD_S",
    "READY_WAIT_S",
    "SILENT_WORKER_S",
    "T0_LEAD_S",
    "MasterPlugin",
]

log = logging.getLogger("vllm_locust")

# --run-time starts at the first load request, or this long after the start at the latest
FIRST_REQUEST_WAIT_S = 60.0
# every worker silent this long: the run is stopped (a stall shorter than this is survived)
ABANDON_RUN_S = 10.0
# a live rate change starts this far ahead, so every worker switches at the same point
RATE_CHANGE_LEAD_S = 0.5
# open loop: the agreed t0 lies this far ahead, so every worker has it before the first arrival
T0_LEAD_S = 0.2
# open loop: a worker not ready this long after the first one is left behind (dead, stuck)
READY_WAIT_S = 90.0


class MasterPlugin:
    """Master (or local runner) side: collect, watch workers, drain on stop, write results on quit."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        env_state.set_master_handler(env, self.handle)
        self.results_dir = options(env).handoff.results_dir or os.path.join(
            "results", time.strftime("run-%Y%m%d-%H%M%S")
        )
        self.collector: Collector | None = None
        self.drained = False
        self.written = False
        self.result: RunResult | None = None  # the one result, once written (the LLM tab's final figures)
        self.exit_code = exit_codes.OK
        runner = env.runner
        if isinstance(runner, MasterRunner):
            messages.register(runner, messages.TO_MASTER, self.handle)
        self.next_index = 0
        self.granted: dict[str, int] = {}
        self.live: LiveView | None = None
        self.profile: ServerProfile | None = None
        # starts, user and rate changes, stop (result.json "timeline")
        self.timeline: list[dict[str, Any]] = []
        self.segments: list[list[float]] = []  # open loop: [offset s, rate] of the global schedule
        # open loop: the schedule's start (wall clock), agreed once every user is set up
        self.t0: float | None = None
        self.ready: set[str] = set()  # open loop: workers whose users all wait for tickets
        self._t0_round = 0  # which test's t0 is being agreed (a late fallback of an earlier one does nothing)
        # each remote worker's clock offset to this one: (the applied first measurement, the latest)
        self.clocks: dict[str, tuple[Offset, Offset]] = {}
        self._drift_said: set[str] = set()
        self.headless = bool(env.parsed_options is None or env.parsed_options.headless)
        self.exporter: Any = None  # --prometheus-port: /metrics from now on (seen before the test starts)
        # imported only when asked for: prometheus_client costs ~0.2 s at start-up
        if options(env).prometheus.prometheus_port:
            from vllm_users.distributed.views import prometheus_export

            self.exporter = prometheus_export.serve(env, options(env), self._target_rate)
        # --run-time is ours to count, from the first load request: Locust's clock would start at the spawn,
        # before the workers' start-up (and a plain run's calibration) sent anything
        self.run_time_s: float | None = locust_option(env, "run_time") or None
        if self.run_time_s and self.headless and env.parsed_options is not None:
            env.parsed_options.run_time = None
        self.clock_started = False
        limit = options(env).load.stop_after_failing
        self.failing = TotalFailure(limit) if limit else None  # --stop-after-failing's watch
        env.events.test_start.add_listener(self._start)
        env.events.test_stopping.add_listener(lambda **_: self.drain())
        env.events.test_stop.add_listener(self._stopped)
        env.events.quitting.add_listener(self._quitting)
        self.interrupted: str | None = None  # the signal that stopped the run before its end
        # beside Locust's own SIGTERM handler (it quits; this one, installed first, runs first): the result says so
        gevent.signal_handler(signal.SIGTERM, self._signalled, "SIGTERM")
        if env.web_ui is not None:
            web_ui.install(env, self)

    def _start(self, **_: Any) -> None:
        self.t0, self.ready = None, set()  # each test (the web UI starts a new one) agrees its own t0
        self.clocks = {}  # and each worker measures its clock again for it
        self._t0_round += 1
        if self.collector is None:
            o = options(self.env)
            self.collector = Collector(self.results_dir)
            if self.exporter is not None:
                self.exporter.configure(o)
                self.exporter.attach(self.collector)
            self.t_start = time.time()
            self.live = LiveView(self.collector, o, self.results_dir, self.timeline)
            if o.load.request_rate is not None:
                self.segments = [[0.0, float(o.load.request_rate)]]
            self.mark("start", users=locust_option(self.env, "num_users"), request_rate=self.live.target_rate)
            self.profile = start_profile(o, self.env.host)  # --profile: around the load
            gevent.spawn(self._watch)
            log.info("vllm-locust: writing records to %s", self.results_dir)
            if not self.headless:  # the web UI's first swarm (Locust alone ignores --run-time in the UI)
                self.run_time_s = locust_option(self.env, "run_time") or None
            if self.run_time_s:
                log.info("vllm-locust: --run-time %gs counts from the first load request", self.run_time_s)
                gevent.spawn_later(
                    FIRST_REQUEST_WAIT_S,
                    self.start_clock,
                    f"no load request within {FIRST_REQUEST_WAIT_S:g} s of the start",
                )

    def _signalled(self, name: str) -> None:
        """A signal stops the run: recorded unless an SLO search's step was stopped early on purpose."""
        if not os.path.exists(run_dir.path(self.results_dir, run_dir.EARLY_STOP)):
            self.interrupted = self.interrupted or name

    def start_clock(self, why: str = "") -> None:
        """--run-time starts now: at the run's first load request (a worker said so), or `why` it starts anyway."""
        if self.clock_started or not self.run_time_s or self.drained:
            return
        self.clock_started = True
        if why:
            log.warning("vllm-locust: --run-time counts from now: %s", why)
        gevent.spawn_later(self.run_time_s, self._run_time_up)

    def _run_time_up(self) -> None:
        runner = self.env.runner
        if runner is None:
            return
        if not self.drained:
            log.info("vllm-locust: --run-time reached; stopping")
            self.mark("stop", reason="run-time")
        if (
            self.headless
        ):  # as Locust's own --run-time: a headless run quits, even one whose test already stopped
            runner.quit()
        elif not self.drained:
            runner.stop()

    def mark(self, kind: str, **detail: Any) -> None:
        """A change on the run's timeline (and the web UI's charts)."""
        self.timeline.append({"t": round(time.time(), 3), "kind": kind, **detail})

    def on_swarm(self, users: str | None, spawn_rate: str | None) -> None:
        """The web UI edited the running swarm (closed loop: users and spawn rate); its start is the "start" mark."""
        if self.collector is not None:
            self.mark("users", users=_num(users), spawn_rate=_num(spawn_rate))

    def change_rate(self, rate: float) -> tuple[bool, str]:
        """Open loop: from now on the global schedule runs at `rate`; every worker re-plans its share."""
        o = options(self.env)
        if not o.open_loop or self.collector is None or self.live is None:
            return False, "the request rate changes an open-loop run (--request-rate) that is running"
        if self.drained:
            return False, "the run is stopping"
        if o.trace.trace:  # no rate segments to change: the trace's own times are the schedule
            return (
                False,
                "a --trace run sends each request at the trace's own time (--time-scale sets the speed)",
            )
        why = web_ui.parse_rate(rate)
        if why or math.isinf(self.segments[-1][1]):
            return False, why or "an infinite rate (all at once) cannot be changed"
        if self.t0 is None:
            return False, "the schedule starts once every user is set up; try again then"
        self.segments.append([round(time.time() + RATE_CHANGE_LEAD_S - self.t0, 6), rate])
        self._to_workers(messages.Rate(self.segments))
        self.live.target_rate = rate
        self.mark("rate", request_rate=rate)
        log.info("vllm-locust: request rate changed to %g req/s", rate)
        return True, f"request rate {rate:g} req/s from now on"

    def _stopped(self, **_: Any) -> None:
        """Web UI: the test stopped (button, budget or run-time): write the run directory as headless does."""
        if self.headless or self.collector is None or self.written:
            return
        try:
            self.drain()
            if not self.timeline or self.timeline[-1]["kind"] != "stop":  # --run-time marked it already
                self.mark("stop")
            self.write()
            locust_html_report(self.env)  # Locust writes --html at a headless exit only
        finally:  # the UI reports "stopping" until this final snapshot is in (web_ui.extend)
            if self.live is not None:  # the final figures are result.json's
                self.live.update(self._state(), finished=True, result=self.result)

    def handle(self, msg: messages.ToMaster, client_id: str) -> None:
        """A message from a worker (or from the local context)."""
        if self.collector is None:
            self._start()
        msg.deliver(self, client_id)

    def _to_workers(self, msg: messages.ToWorker, client_id: str | None = None) -> None:
        messages.to_workers(self.env.runner, context_or_none(self.env), msg, client_id)

    def on_batch(self, batch: messages.Batch, client_id: str) -> None:
        """A worker's batch: into the collector."""
        assert self.collector is not None
        self.collector.on_batch(batch, client_id)

    def on_done(self, worker: str) -> None:
        """A worker used up its share; the run ends once every worker has."""
        assert self.collector is not None
        self.collector.on_done(worker)
        if self._all_done():
            gevent.spawn(self._finish_run)

    def on_ready(self, worker: str, client_id: str) -> None:
        """Open loop: every user of `worker` waits for a ticket. Once all workers are, t0 is agreed."""
        if self.t0 is not None:  # a worker that joined late takes the schedule as it runs
            self._send_t0(client_id)
            return
        if not self.ready:
            gevent.spawn_later(
                READY_WAIT_S,
                self._agree_t0,
                f"not every worker was ready within {READY_WAIT_S:g} s",
                self._t0_round,
            )
        self.ready.add(worker)
        runner = self.env.runner
        expected = runner.worker_count if isinstance(runner, MasterRunner) else 1
        if len(self.ready) >= max(1, expected):
            self._agree_t0()

    def _agree_t0(self, why: str = "", round_: int | None = None) -> None:
        """Start the open-loop schedule on every worker at one t0, a little ahead of now."""
        if self.t0 is not None or (round_ is not None and round_ != self._t0_round):
            return
        if why:
            log.warning("vllm-locust: the arrival schedule starts now: %s (%d ready)", why, len(self.ready))
        self.t0 = time.time() + T0_LEAD_S
        self.mark("schedule", t0=round(self.t0, 6), workers=len(self.ready))
        log.info("vllm-locust: every user is set up; the arrival schedule starts")
        self._send_t0(None)

    def _send_t0(self, client_id: str | None) -> None:
        if self.t0 is not None:
            self._to_workers(messages.T0(self.t0), client_id)

    def on_clock_ping(self, ping: messages.ClockPing, client_id: str) -> None:
        """A worker's clock probe: answered at once with this clock (the axis of t0 and the server's metrics)."""
        self._to_workers(messages.ClockPong(ping.seq, time.time()), client_id)

    def on_clock_report(self, report: messages.ClockReport) -> None:
        """A worker measured its clock's offset: kept for result.json, said when large or drifting."""
        new = Offset(report.offset_s, report.uncertainty_s, report.rtt_s, report.probes)
        applied = self.clocks[report.worker][0] if report.worker in self.clocks else None
        said = offset_warning(report.worker, applied, new)
        if said and (applied is None or report.worker not in self._drift_said):  # a drift once per worker
            log.warning("vllm-locust: %s", said)
            if applied is not None:
                self._drift_said.add(report.worker)
        self.clocks[report.worker] = (applied or new, new)

    def on_need(self, need: messages.Need, client_id: str) -> None:
        """Hand out the next tickets of the run's request budget (closed loop with --num-prompts)."""
        budget = options(self.env).load.num_prompts or 0
        start = self.next_index
        count = max(0, min(need.n, budget - start))
        self.next_index += count
        self.granted[need.worker] = self.granted.get(need.worker, 0) + count
        self._to_workers(messages.Grant(start, count), client_id)

    def _all_done(self) -> bool:
        assert self.collector is not None
        o = options(self.env)
        budget = o.load.num_prompts or 0
        if budget and not o.open_loop:
            # closed loop: every ticket handed out, and each worker that got some has finished them
            workers = self.collector.workers
            return self.next_index >= budget and all(
                (workers.get(w) is not None and (workers[w].done or workers[w].lost_at is not None))
                for w, n in self.granted.items()
                if n
            )
        runner = self.env.runner
        expected = runner.worker_count if isinstance(runner, MasterRunner) else 1
        done = sum(1 for w in self.collector.workers.values() if w.done and w.lost_at is None)
        return done >= max(1, expected)

    def _finish_run(self, why: str = "every worker finished its share of requests") -> None:
        if why:
            log.info("vllm-locust: %s; stopping", why)
        runner = self.env.runner
        assert runner is not None
        if self.env.parsed_options and self.env.parsed_options.headless:
            runner.quit()
        else:
            runner.stop()

    def _watch(self) -> None:
        """Report workers that go missing by name, as soon as Locust notices."""
        runner = self.env.runner
        last_progress = 0.0
        while self.collector is not None and not self.written:
            gevent.sleep(0.5)
            now = time.time()
            self.collector.flush()  # a full disk shows within half a second, not at the end
            if now - last_progress >= 2.0:
                last_progress = now
                self.collector.write_progress(self.results_dir)
                # headless: nobody looks; written: the final snapshot (finished) must stay the last one
                if self.live is not None and self.env.web_ui is not None and not self.written:
                    self.live.update(self._state())
            failed = self._write_failure()
            if failed and not self.drained:  # a full disk: stop, keep what was written (exit WRITE_FAILED)
                log.error("vllm-locust: %s; stopping the run", failed)
                # Locust's own report would fail too, and its error at exit skips the quitting that writes
                # the results
                if self.env.parsed_options is not None:
                    self.env.parsed_options.html_file = None
                self.mark("stop", reason="write failed")
                gevent.spawn(self._finish_run, "")
                return
            if self.failing is not None and not self.drained and self._all_failing(now):
                return
            if not isinstance(runner, MasterRunner):
                continue
            clients = list(runner.clients.values())
            missing = {c.id for c in clients if c.state == STATE_MISSING}
            self.collector.mark_unanswering({c.id for c in clients}, missing, now)
            gone = self.collector.none_left(ABANDON_RUN_S, now)
            # (drained too: Locust stops the test itself when its last worker goes missing, and a headless run
            # must still quit; --run-time's clock is ours, so Locust's own timer will not quit it)
            if gone and not self._all_done():
                if gone == "lost":
                    log.error("vllm-locust: no live worker left; stopping the run")
                # "ended": every worker sent its final batch after a stop (--run-time, a burst's end, the UI's
                # button): a normal end, which an ERROR would flag on the web UI's Logs tab
                gevent.spawn(self._finish_run, "" if gone == "lost" else "every worker sent its final batch")
                return

    def _all_failing(self, now: float) -> bool:
        """--stop-after-failing: every request failed for its seconds; the run is stopped (True) then."""
        assert self.collector is not None and self.failing is not None
        totals = [w.totals for w in self.collector.workers.values()]
        ok, failed = (sum(t.get(k, 0) for t in totals) for k in ("ok", "failed"))
        if not self.failing.update(ok, failed, now):
            return False
        log.error(
            "vllm-locust: every request failed for %gs (--stop-after-failing: a server gone away?); stopping the run",
            self.failing.limit_s,
        )
        self.mark("stop", reason="every request failing")
        gevent.spawn(self._finish_run, "")
        return True

    def _write_failure(self) -> str | None:
        """The first write of the run's records that failed, the master's own or a worker's (None: none)."""
        if self.collector is None:
            return None
        said = [w.totals.get("write_error") for w in self.collector.workers.values()]
        return self.collector.write_error or next((str(e) for e in said if e), None)

    def _target_rate(self) -> float | None:
        return self.live.target_rate if self.live is not None else None

    def _state(self) -> str:
        return str(self.env.runner.state) if self.env.runner is not None else ""

    def drain(self) -> None:
        """Ask every worker to finish in-flight streams and send its final batch; wait for them."""
        if self.drained or self.collector is None:
            return
        self.drained = True
        # after a failed write nothing more reaches the disk: in-flight streams are cut at once, not awaited
        timeout = 0.0 if self._write_failure() else options(self.env).measure.stop_timeout
        self._to_workers(messages.Stop(timeout))
        if isinstance(self.env.runner, MasterRunner):
            deadline = time.time() + timeout + 10
            while self.collector.live() and time.time() < deadline:
                gevent.sleep(0.1)
        self.collector.flush()

    def _quitting(self, **_: Any) -> None:
        self.drain()
        try:
            self.write()
        except OSError as e:  # a disk too full even for the room held for the end files: one line, exit 10
            log.error("vllm-locust: the results could not be written: %s", e)
            self.exit_code = exit_codes.WRITE_FAILED
        if self.env.process_exit_code is None or self.env.process_exit_code == 0:
            self.env.process_exit_code = self.exit_code
        if self.exporter is not None:  # after the result: a scraper's last visit gets the final figures
            self.exporter.close()

    def write(self) -> RunResult | None:
        """Stop the server's profiler, then write histograms, health and the one result.json (once)."""
        if self.written or self.collector is None:
            return None
        self.written = True
        c = self.collector
        c.close()
        if self.exporter is not None:  # every batch is in: the final figures (before result.json appears)
            self.exporter.finish()
        c.write_side_files()
        profile = stop_profile(
            self.profile, self.results_dir
        )  # the load has ended: before the result is built
        o = options(self.env)
        meta = run_meta(o, self.env, self.t_start, run_time=self.run_time_s, timeline=self.timeline)
        meta["prompt_calibration"] = c.calibration
        if self.clocks:  # remote workers only: a local run has one clock
            meta["clock_offsets"] = {
                w: as_meta(latest, applied) for w, (applied, latest) in self.clocks.items()
            }
        stopped_by = interruption(self.results_dir, self.interrupted)
        base = max(self.exit_code, note_faults(meta, c, self._write_failure(), stopped_by))
        atomic_json(run_dir.path(self.results_dir, run_dir.META), meta)
        res = final_result(
            self.results_dir,
            meta,
            o,
            c,
            timeline=self.timeline,
            base_code=base,
            host=self.env.host,
            profile=profile,
        )
        res = with_fault_warnings(res, c)
        save_result(self.results_dir, res)
        self.result = res
        self.exit_code = code = res.exit_code or exit_codes.OK
        atomic_json(run_dir.path(self.results_dir, run_dir.EXIT_CODE), {"exit_code": code})
        log.info("vllm-locust: results in %s (exit code %d)", self.results_dir, code)
        return res


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None
