"""Wires vllm-locust into Locust's events: the option table, the options, the worker's context, its messages
from the master and its watchdog; on a master (or local runner) the MasterPlugin (master_plugin.py).

Importing this module (any vllm_users user class does) registers the listeners once per process.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import sys
import time
from argparse import ArgumentTypeError
from typing import Any

import gevent
from locust import argument_parser, events
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, WorkerRunner
from locust.stats import StatsCSVFileWriter

from vllm_users import exit_codes
from vllm_users.client import tls
from vllm_users.distributed import env_state, lengths, user_errors
from vllm_users.distributed.env_state import context_or_none
from vllm_users.distributed.master_plugin import MasterPlugin
from vllm_users.distributed.transport import messages
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.errors import UsageError
from vllm_users.measure.health import tune_gc_after_start
from vllm_users.options import add_locust_options, from_namespace

log = logging.getLogger("vllm_locust")


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    add_locust_options(parser)
    check_when_parsed(parser)


def check_when_parsed(parser: Any) -> None:
    """Make Locust's parser refuse options that break a rule (Options checks itself as it is built) as it
    refuses a bad value: `locust: error: ...`, one line, exit 2, before Locust starts anything."""
    parse = parser.parse_known_args

    def parse_known_args(*args: Any, **kwargs: Any) -> Any:
        ns, rest = parse(*args, **kwargs)
        try:
            from_namespace(ns)
        except UsageError as e:
            parser.error(str(e))
        return ns, rest

    parser.parse_known_args = parse_known_args


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    try:
        tls.configure(
            tls.TLSConfig.of(env_state.refresh_options(environment).server)
        )  # /metrics, profiler, sim stats
    # Locust's parser checked each value and the rules (check_when_parsed): only a namespace set by hand gets here
    except (ArgumentTypeError, UsageError) as e:
        log.error("vllm-locust: %s", e)
        sys.exit(exit_codes.USAGE)
    if isinstance(runner, MasterRunner | LocalRunner):
        MasterPlugin(environment)
    if not isinstance(runner, MasterRunner):
        environment.events.user_error.add_listener(lambda **kw: _on_user_error(environment, **kw))
        # every user and its prompt source exist once spawning completes: freeze them out of the GC's scans.
        # The event carries only user_count (a listener asking for `environment` raised on every worker: exit 2)
        environment.events.spawning_complete.add_listener(lambda **_: _on_spawned(environment))
    if isinstance(runner, WorkerRunner):
        # Locust 2.4x rebuilds its whole argument parser once per option of every spawn message
        # (runners.py: `k not in default_args_dict()` in a loop): ~150 builds block the worker's loop for
        # 0.3-5 s at start-up. The defaults never change inside a process: build them once.
        if not hasattr(argument_parser.default_args_dict, "cache_info"):
            argument_parser.default_args_dict = functools.cache(argument_parser.default_args_dict)
        messages.register(runner, messages.TO_WORKER, lambda msg, _node: _to_context(environment, msg))
        gevent.spawn(_master_watchdog, environment)


def _on_user_error(environment: Environment, exception: BaseException, tb: Any = None, **_: Any) -> None:
    """A task raised: counted by type, message and line (the master names it in the run's last line)."""
    ctx = context_or_none(environment)
    if ctx is not None:
        user_errors.add(ctx.user_errors, exception, tb)


MASTER_SILENCE_S = float(os.environ.get("VLLM_LOCUST_MASTER_TIMEOUT", "10"))


def _master_watchdog(environment: Environment) -> None:
    """A worker whose master went silent keeps its records on disk and exits (Locust alone waits 60 s)."""
    last = {"t": time.time()}

    def beat(**_: Any) -> None:
        last["t"] = time.time()

    environment.events.heartbeat_received.add_listener(beat)
    while True:
        gevent.sleep(1.0)
        if time.time() - last["t"] > MASTER_SILENCE_S:
            log.error(
                "vllm-locust: no heartbeat from the master for %.0f s; saving records and exiting",
                MASTER_SILENCE_S,
            )
            ctx = context_or_none(environment)
            if ctx is not None:
                ctx.drain(0)
            runner = environment.runner
            assert runner is not None
            runner.greenlet.kill(block=False)
            return


def _to_context(environment: Environment, msg: messages.ToWorker) -> None:
    """A message from the master, for this worker's context (none before the test started: dropped)."""
    ctx = context_or_none(environment)
    if ctx is not None:
        msg.deliver(ctx)


def _on_spawned(environment: Environment) -> None:
    tune_gc_after_start()
    ctx = context_or_none(environment)
    if ctx is not None:  # open loop: the schedule starts once these users are set up
        ctx.on_spawned()


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if isinstance(
        runner, MasterRunner | LocalRunner
    ):  # plain locust: the run's one calibration, before any worker starts
        lengths.calibrate_once(environment)
    if isinstance(runner, MasterRunner):
        # workers receive these through the spawn message's parsed_options (Locust's namespace: the one thing
        # the master writes into; each process then builds its own frozen Options from it)
        ns: Any = environment.parsed_options
        ns.vllm_worker_count = max(1, runner.worker_count)
    # the web UI's form and the spawn message may have changed them: one fresh object per test
    try:
        o = env_state.refresh_options(environment)
    except UsageError as e:  # the web UI's form broke a rule: one line, and this test stops (the UI stays up)
        log.error("vllm-locust: error: %s", e)
        if runner is not None:
            gevent.spawn(runner.stop)
        return
    tls.configure(tls.TLSConfig.of(o.server))  # a worker gets its master's TLS options in the spawn message
    if isinstance(runner, MasterRunner):
        return
    if isinstance(runner, WorkerRunner):
        index, count = (
            runner.worker_index % (o.handoff.vllm_worker_count or 1),
            o.handoff.vllm_worker_count or 1,
        )
        send = messages.to_master(runner)
    else:
        index, count = 0, 1
        handle = env_state.master_handler(environment)

        def send(msg: messages.ToMaster) -> None:
            handle(msg, "local")

    # a worker of a master measures its clock's offset to the master's: its host's clock may differ
    ctx = WorkerContext(o, index, count, send, measure_clock=isinstance(runner, WorkerRunner))
    ctx.users = lambda: max(1, environment.runner.user_count if environment.runner else 1)
    env_state.set_context(environment, ctx)
    ctx.start()


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    ctx = context_or_none(environment)
    if ctx is not None and not isinstance(environment.runner, MasterRunner):
        ctx.drain(0)


@events.quit.add_listener
def _on_quit(**_: Any) -> None:
    stop_csv_writers()


def stop_csv_writers() -> int:
    """Kill Locust's `--csv` writer greenlets; returns how many. Locust 2.47 closes the CSV files at exit while
    that greenlet still runs: on a busy machine it wakes once more between the close and the exit and dies with
    'I/O operation on closed file', a traceback in the master's output after a run that went well. The quit
    event fires just before the close; the rows it would have rewritten are at most a second old."""
    writers = [
        g
        for g in gc.get_objects()
        if isinstance(g, gevent.Greenlet)
        and not g.dead
        and isinstance(getattr(getattr(g, "_run", None), "__self__", None), StatsCSVFileWriter)
    ]
    for g in writers:
        g.kill(block=True, timeout=1.0)
    return len(writers)
