"""`vllm-locust run`: options checked, the server preflighted, then a Locust master plus N workers
(orchestration.launch.launcher), progress, summary, results."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from orchestration.capacity.flags import settle
from orchestration.capacity.run_hooks import multi_run
from orchestration.capacity.steps import check_twin, embedded_simulator, simulator_args, with_twin
from orchestration.commands import reported
from orchestration.launch.launcher import header_dict, launch, say
from orchestration.server.preflight import (
    calibrate_prompts,
    check_context_fits,
    check_server,
    listed_context,
    reset_prefix_cache,
)
from orchestration.server.server_wait import Wait
from orchestration.settings import config as C
from orchestration.settings import presets
from orchestration.settings.input_checks import prepare
from vllm_users import errors
from vllm_users import run_dir as R
from vllm_users.client import tls
from vllm_users.client.endpoints import fleet_connection, primary_host
from vllm_users.errors import PreflightError
from vllm_users.measure.run_result import result_path
from vllm_users.model_mix import parse_mix as parse_model_mix
from vllm_users.options import RUN, Options, changed, env_api_key
from vllm_users.scenarios.registry import (
    SCHEDULED_STARTS,
    for_endpoint,
    is_class_ref,
    locustfile_source,
    mix_label,
    parse_mix,
)
from vllm_users.workload.classes import check_scenarios, class_models
from vllm_users.workload.images import check_images
from vllm_users.workload.prompts import LengthModel
from vllm_users.workload.trace_schedule import check_graph_context, plan_of

__all__ = [
    "DEFAULT_NUM_PROMPTS",
    "PROG",
    "add_run_parser",
    "check_twin",
    "check_users",
    "check_windows",
    "lengths_line",
    "main",
    "new_run_parser",
    "resolve_users",
    "run",
    "run_options",
    "schedule_span",
    "validate",
]

PROG = "vllm-locust"  # run's errors read `vllm-locust: error: ...` (the plain command's name)
DEFAULT_NUM_PROMPTS = 200  # when neither --num-prompts nor --run-time is given


def new_run_parser(prog: str) -> argparse.ArgumentParser:
    """A stand-alone parser of `vllm-locust run`'s flags (for commands that take the same options)."""
    run_parser = add_run_parser(C.OneLineParser(prog=prog).add_subparsers())
    run_parser.__class__ = C.OneLineParser
    run_parser.prog = prog
    return run_parser


def run_options(argv: Sequence[str]) -> Options:
    """`vllm-locust run`'s options from argv, --config, env and --preset, as the master sees them (UsageError
    when bad)."""
    return C.parse_options(new_run_parser("vllm-locust run"), list(argv), RUN)


def add_run_parser(sub: Any) -> argparse.ArgumentParser:
    """Register `run` and its flags."""
    p: argparse.ArgumentParser = sub.add_parser(
        "run", help="Run a load test (against the embedded simulator when no --host)"
    )
    C.add_options(p, RUN, {"preset": sorted(presets.PRESETS)})
    return p


def resolve_users(scenario: str | None, locustfile: str | None) -> tuple[list[tuple[str, int]], list[str]]:
    """The run's user mix and locustfiles from --scenario and -f, checked (imported in a child process)."""
    if locustfile and not os.path.isfile(locustfile):
        raise C.UsageError(f"-f {locustfile}: no such file")
    files = [os.path.abspath(locustfile)] if locustfile else []
    try:  # -f alone runs only the file's users; neither runs chat
        mix = parse_mix(scenario) if scenario else ([] if files else [("chat", 1)])
    except ValueError as e:
        raise C.UsageError(f"--scenario: {e}") from None
    check_users(mix, files)
    return mix, files


def check_users(mix: list[tuple[str, int]], files: list[str]) -> dict[str, Any] | None:
    """Import user classes (`package.module:Class`, `-f FILE`) in a child process (Locust monkey-patches what
    imports it); UsageError with its one-line message. Built-in scenarios need no check (None)."""
    if not files and not any(is_class_ref(n) for n, _ in mix):
        return None
    spec = ",".join(n if w == 0 else f"{n}:{w}" for n, w in mix)
    argv = [sys.executable, "-m", "vllm_users.scenarios.loader", "--scenario", spec]
    for f in files:
        argv += ["-f", f]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONWARNINGS="ignore")
    )
    if done.returncode != 0:
        lines = [x for x in done.stderr.splitlines() if x.strip()]
        msg = (
            lines[-1].removeprefix("error: ")
            if lines
            else f"checking the user classes failed ({done.returncode})"
        )
        raise C.UsageError(msg)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def validate(a: Options) -> tuple[Options, list[tuple[str, int]], list[str]]:
    """What the options need beyond their rules (Options checks those as it is built): the trace file, the user
    classes, the dataset, schema and tokenizer, TLS files, the twin profile, the windows against the run's
    defaults; UsageError with one line. The options with the run's choices filled in, the user mix and the
    locustfiles."""
    if a.trace.trace:
        a = _trace_options(a)
    mix, files = resolve_users(a.scenario.scenario, a.scenario.locustfile)
    try:  # --endpoint embeddings/rerank/score run the pooling users; a scenario that cannot use it: exit 2
        mix = for_endpoint(mix, a.scenario.endpoint)
    except ValueError as e:
        raise C.UsageError(str(e)) from None
    a = prepare(a, [n for n, _ in mix])  # scenario defaults; dataset, schema and tokenizer checked
    class_models(a.classes.class_)  # the classes checked together (names unique) before anything is sent
    if not files:  # -f's users name their scenarios when they load
        check_scenarios(a.classes.class_, [n for n, _ in mix])
    a = settle(a)
    tls.configure(
        tls.TLSConfig.of(a.server)
    )  # the preflight's, calibration's and /metrics' TLS; a bad file: exit 2 now
    if a.simulator.twin:
        check_twin(a.simulator.twin, a.server.host)
    # a trace ends with its last request
    if a.load.num_prompts is None and a.load.run_time is None and not a.trace.trace:
        a = changed(a, num_prompts=DEFAULT_NUM_PROMPTS)
    check_windows(a, [n for n, _ in mix], files)
    if a.processes.workers is None:
        a = changed(a, workers=max(1, os.cpu_count() or 1))
    try:  # images ride only on chat requests, and JPEG needs Pillow: a bad choice is exit 2 before anything runs
        check_images(a.images, a.scenario.endpoint, "vision" in (n for n, _ in mix))
    except ValueError as e:
        raise C.UsageError(str(e)) from None
    return a, mix, files


def check_windows(a: Options, scenarios: Sequence[str] = ("chat",), files: Sequence[str] = ()) -> None:
    """--warmup and --cooldown must leave requests to measure: windows that take every request of --num-prompts,
    all of --run-time, or a time --warmup longer than an open-loop schedule that alone sets every start, are a
    UsageError (the run would measure nothing and say so only at its end). Where the starts depend on the server
    (a closed loop, a capped queue), nothing is provable before the load: the run says so at its end."""
    from vllm_users.measure.windows import parse_optional

    warm, cool = parse_optional(a.measure.warmup), parse_optional(a.measure.cooldown)
    flags = " ".join(f"--{n} {w.text}" for n, w in (("warmup", warm), ("cooldown", cool)) if w is not None)
    count = sum(w.requests or 0 for w in (warm, cool) if w is not None)
    if a.load.num_prompts and not a.trace.trace and count >= a.load.num_prompts:
        raise C.UsageError(
            f"{flags} leaves out {count} requests, the run has {a.load.num_prompts} (--num-prompts): "
            "nothing would be measured; shorten the window or send more"
        )
    secs = sum(w.seconds or 0.0 for w in (warm, cool) if w is not None)
    if a.load.run_time and secs >= a.load.run_time:
        raise C.UsageError(
            f"{flags} covers {secs:g} s, the run lasts {a.load.run_time:g} s (--run-time): nothing would "
            "be measured; shorten the window or run longer"
        )
    span = schedule_span(a, scenarios, files) if warm is not None and warm.seconds else None
    if span is not None and warm is not None and warm.seconds and span < warm.seconds:
        raise C.UsageError(
            f"--warmup {warm.text} takes every request: the schedule starts all {a.load.num_prompts} "
            f"(--num-prompts) within {span:.3g} s of the first; nothing would be measured; use a count "
            "(--warmup Nr), a shorter window or more requests"
        )


def schedule_span(a: Options, scenarios: Sequence[str], files: Sequence[str] = ()) -> float | None:
    """Seconds from the first to the last start of an open-loop run whose schedule alone sets every start: a fixed
    rate or ramp, --num-prompts, one request per ticket, never more due than its slots (--max-concurrency or the
    default) so no request waits for a completion; None where the server's speed decides the starts."""
    from orchestration.launch.launcher import DEFAULT_OPEN_LOOP_SLOTS
    from vllm_users.workload.arrivals import global_schedule
    from vllm_users.workload.ramp import ramp_schedule

    n, ld = a.load.num_prompts, a.load
    if not a.open_loop or a.trace.trace or not n or a.processes.web_ui or files:
        return None  # closed loop, a trace's sessions, a budget of time, live rate changes, user code
    if not set(scenarios) <= SCHEDULED_STARTS or n > (ld.max_concurrency or DEFAULT_OPEN_LOOP_SLOTS):
        return None
    if ld.ramp_up_strategy:
        offsets = ramp_schedule(
            n,
            ld.ramp_up_strategy,
            ld.ramp_up_start_rps or 0.0,
            ld.ramp_up_end_rps or 0.0,
            ld.burstiness,
            a.request.seed,
        )
    elif ld.request_rate is None or math.isinf(ld.request_rate):
        return 0.0  # all at once
    else:
        offsets = global_schedule(n, ld.request_rate, ld.burstiness, a.request.seed)
    return float(offsets[-1] - offsets[0])


def _trace_options(a: Options) -> Options:
    """--trace (alone: vllm_users.option_rules): the file read and checked here, before anything is sent; its
    user is the `trace` scenario."""
    from vllm_users.workload.trace_schedule import check_trace

    # TraceError (exit 2) naming the file, line and field of a bad line
    say(a.outputs, check_trace(a.trace, a.scenario.endpoint, a.load.num_prompts))
    return changed(a, scenario="trace")


def check_sim_args(a: Options) -> None:
    """UsageError naming what is wrong with --sim-args when the run starts the embedded simulator (no --host)."""
    from vllm_sim.config import args_problem

    if a.server.host or not a.simulator.sim_args:
        return
    problem = args_problem(a.simulator.sim_args.split())
    if problem:
        raise C.UsageError(f"--sim-args: {problem}")  # not the text itself: it may hold --api-key


def with_sim_model(a: Options) -> Options:
    """The embedded simulator serves the run's --model (a mix's first name) unless --sim-args names its own: a run
    that starts the simulator would otherwise fail its preflight on any --model but the simulator's default."""
    if a.server.host or not a.server.model:
        return a
    tokens = (a.simulator.sim_args or "").split()
    if any(t == "--model" or t.startswith("--model=") for t in tokens):
        return a
    try:
        mix = parse_model_mix(a.server.model)
    except ValueError:  # said in one line by the options' own check
        return a
    if mix is None:
        return a
    return changed(a, sim_args=" ".join(["--model", mix.base, *tokens]))


def with_sim_replicas(a: Options) -> Options:
    """A run that starts the simulator with --replicas N > 1 (or a twin of several) reads who answered each request
    from the simulator's own header, unless --replica-header names another: it started the replicas, so their
    per-replica table needs no flag."""
    if a.server.host or a.server.replica_header:
        return a
    from vllm_sim.config import parse_config
    from vllm_sim.replicas import REPLICA_HEADER

    if parse_config(simulator_args(a)).replicas < 2:
        return a
    return changed(a, replica_header=REPLICA_HEADER)


def run(a: Options, watch: Callable[[dict[str, Any]], str | None] | None = None) -> int:
    """Execute `vllm-locust run`; returns the exit code (UsageError on bad options). `watch` (--find-max-rate's
    steps) reads the progress and names a reason to stop the run early."""
    a = with_twin(a)  # the embedded simulator (of one run, or shared by a multi-run's steps) reads it
    # a file in the way or no permission: one line, exit 2, before anything runs
    R.check_writable(a.outputs.output_dir)
    a = with_sim_model(a)
    check_sim_args(a)
    a = with_sim_replicas(a)
    code = multi_run(a, run, lambda o: validate(o)[0])  # --find-max-rate, --sweep, --repeats: several runs
    if code is not None:
        return code
    a, mix, files = validate(a)
    api_key = a.server.api_key or env_api_key()
    names = mix_label(mix, files)
    run_dir = R.named_dir(a.outputs.output_dir, a.outputs.run_name, names)
    if os.path.exists(result_path(run_dir)):
        raise C.UsageError(f"run directory {run_dir} already holds a result; choose another --run-name")
    R.make_dir(run_dir)
    with contextlib.ExitStack() as stack:
        # the host's userinfo becomes a header here: the URL every process, file and line sees has none
        # several URLs (comma-separated or @FILE): comma-joined here, each checked by the preflight
        host, headers = fleet_connection(a.server.host, header_dict(a.request), api_key)
        sim = None
        if not host:
            sim = stack.enter_context(embedded_simulator(a))
            host = sim.url
            say(a.outputs, f"embedded simulator at {host} (pid {sim.pid})")
        first = primary_host(host)  # what takes one server: calibration, the context check
        try:
            info = check_server(
                host,
                a.server.model or None,
                api_key,
                a.scenario.endpoint,
                class_models(a.classes.class_),
                headers,
                Wait(a.preflight.wait_for_server or 0.0, lambda line: say(a.outputs, line)),
            )
        except (
            PreflightError
        ) as e:  # one step of a sweep: its outcome (the sweep records the code and goes on)
            return errors.report(e, PROG)
        # once, for every worker
        lengths = calibrate_prompts(first, info.model, api_key, a.scenario.endpoint, headers)
        say(a.outputs, lengths_line(lengths))
        if lengths.warning:
            print(f"{PROG}: warning: {lengths.warning}", file=sys.stderr, flush=True)
        if _synthetic_lengths(
            a, files
        ):  # --input-len/--output-len are what is sent: they must fit the context
            try:
                check_context_fits(
                    first,
                    info.model,
                    api_key,
                    a.request.input_len,
                    _output_len(a),
                    lengths.overhead or 0,
                    headers,
                )
            except PreflightError as e:
                return errors.report(e, PROG)
        if a.trace.trace:  # a session graph's calls must fit the context too: exit 2, naming the node
            check_graph_context(
                plan_of(a.trace, a.load.num_prompts), listed_context(first, info.model, api_key, headers)
            )
        with open(R.path(run_dir, R.PREFLIGHT), "w") as fh:
            json.dump(
                {
                    "model": info.model,
                    "models": info.models,
                    "stream_attempts": info.attempts,
                    "calibration": lengths.summary(),
                },
                fh,
            )
        if a.preflight.reset_prefix_cache:  # in the preflight: never inside the measured window
            for url in host.split(","):  # every endpoint's cache
                print(f"vllm-locust: {reset_prefix_cache(url, api_key, headers)}", flush=True)
        locustfile = R.path(run_dir, R.LOCUSTFILE)
        with open(locustfile, "w") as fh:
            fh.write(locustfile_source(mix, files))
        return launch(a, host, info.model, run_dir, locustfile, api_key, sim, watch, lengths, headers)


def _synthetic_lengths(a: Options, files: list[str]) -> bool:
    """Whether the prompts are built from --input-len and --output-len (not a dataset's, a trace's or -f code's)."""
    return not (a.prompt.dataset or a.trace.trace or files)


def _output_len(a: Options) -> int:
    """The max_tokens a request asks for (a pooling API generates none)."""
    return 0 if a.scenario.endpoint in ("embeddings", "rerank", "score") else a.request.output_len


def lengths_line(lm: LengthModel) -> str:
    """The preflight's calibration in one line: its source, and what it cost."""
    p = lm.probes
    kind = "exact" if lm.exact else f"{lm.tokens_per_word:.3g} tokens/word"
    cut = f", cut off at {p['cut']}" if p.get("cut") else ""
    return (
        f"prompt lengths: {lm.source} ({kind}); calibrated with {p.get('requests', 0)} probes in "
        f"{p.get('seconds', 0.0):.2f} s{cut}"
    )


@reported(PROG)
def main(argv: Sequence[str]) -> int:
    """`vllm-locust run ARGS`: the options (command line > env > --config > --preset), then the run."""
    return run(run_options(argv))
