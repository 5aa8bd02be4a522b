"""`vllm-locust run`'s processes: a Locust master plus N workers, the progress they write, the summary at the end.

orchestration.commands.run checks the options and the server; `launch` here starts the master and the workers,
waits for them (forwarding Ctrl-C so results get written), prints the summary and returns the run's exit code.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from orchestration.launch.ports import free_port
from orchestration.report.summary import format_summary, progress_line, requests_total
from orchestration.settings import config as C
from vllm_sim.launch import die_with_parent
from vllm_users import exit_codes
from vllm_users import run_dir as R
from vllm_users.atomic import atomic_json
from vllm_users.distributed.options import headers_json
from vllm_users.distributed.server_profile import STOP_TIMEOUT_S as PROFILE_STOP_TIMEOUT_S
from vllm_users.distributed.server_profile import profile_line
from vllm_users.distributed.user_errors import summary_line
from vllm_users.measure.result_notes import no_completed_reason
from vllm_users.measure.run_result import RunResult, load_result, result_path
from vllm_users.model_mix import model_names
from vllm_users.options import (
    METRICS_HEADERS_ENV,
    METRICS_HEADERS_MORE_ENV,
    SPECS,
    Options,
    env_name,
    flag,
    locust_argv,
)
from vllm_users.redact import Redactor, header_lines, redact_argv, secret_values, without_api_key
from vllm_users.run_options import OutputOptions
from vllm_users.workload.classes import parse_classes
from vllm_users.workload.prompt_options import RequestOptions
from vllm_users.workload.prompts import LengthModel

__all__ = [
    "DEFAULT_OPEN_LOOP_SLOTS",
    "FULL_DISK_BYTES",
    "RESULT_LINE_PREFIX",
    "header_dict",
    "launch",
    "locust_args",
    "no_result_line",
    "say",
]

RESULT_LINE_PREFIX = "VLLM_LOCUST_RESULT "  # --print-result: this, then the result JSON on one line
DEFAULT_OPEN_LOOP_SLOTS = 256  # users (max in flight) for open loop without --max-concurrency
FULL_DISK_BYTES = (
    1 << 20
)  # less free than this where the results go: the disk is full, as far as a run is concerned


def say(a: OutputOptions, msg: str) -> None:
    """Print `vllm-locust: msg` unless --quiet."""
    if not a.quiet:
        print(f"vllm-locust: {msg}", flush=True)


def header_dict(a: RequestOptions) -> dict[str, str]:
    """--header NAME:VALUE ... as a dict."""
    return header_lines(a.header)


def locust_args(
    a: Options,
    host: str,
    model: str,
    run_dir: str,
    locustfile: str,
    port: int,
    embedded_sim: bool = False,
    lengths: LengthModel | None = None,
) -> list[str]:
    """Master command line (`embedded_sim`: the host is our simulator; the result cross-checks its count;
    `lengths`: the preflight's prompt-length calibration, for the workers)."""
    open_loop = a.open_loop  # --request-rate or --trace
    if open_loop:
        users = a.load.max_concurrency or DEFAULT_OPEN_LOOP_SLOTS
    else:
        users = a.load.users or a.load.max_concurrency or 8
    args = [
        "-f",
        locustfile,
        "--master",
        "--master-bind-host",
        a.processes.master_bind_host,
        "--master-bind-port",
        str(port),
        "--expect-workers",
        str(a.processes.expect_workers or a.processes.workers),
        "--expect-workers-max-wait",
        "120",
        "--host",
        host,
        "-u",
        str(users),
        "-r",
        str(a.load.spawn_rate or users * 4),  # default: every user within ~0.25 s, like vllm bench
        "--csv",
        R.path(run_dir, R.LOCUST_CSV),
        "--csv-full-history",
        "--html",
        R.path(run_dir, R.LOCUST_REPORT),
        "--stop-timeout",
        f"{int(math.ceil(a.measure.stop_timeout)) + 5}s",
        "--loglevel",
        "INFO",
        "--logfile",
        R.path(run_dir, R.MASTER_LOG),
        "--only-summary",
    ]
    if a.processes.web_ui:
        args += [
            "--web-port",
            str(a.processes.web_port),
            "--web-host",
            a.processes.web_host,
        ]
        if a.processes.web_login:
            args += ["--web-login"]
    else:
        args += ["--headless"]
    if a.load.run_time:
        args += ["--run-time", f"{int(math.ceil(a.load.run_time))}s"]
    set_by_run: dict[str, Any] = {"results_dir": run_dir, "model": model, "vllm_embedded_sim": embedded_sim}
    if len(model_names(a.server.model)) > 1:  # a model mix: the workers draw from it; `model` is its base
        set_by_run["model"] = a.server.model
    if not open_loop:
        set_by_run["max_concurrency"] = None  # closed loop: it only chose the users
    if a.classes.class_:  # traffic classes: --class is run's (repeatable); the workers get them as JSON
        set_by_run["vllm_classes"] = parse_classes(a.classes.class_)
    if lengths is not None:  # the workers take it from the spawn message instead of calibrating
        set_by_run["vllm_lengths"] = json.dumps(lengths.to_table(), separators=(",", ":"))
    return args + locust_argv(a, **set_by_run)


def launch(
    a: Options,
    host: str,
    model: str,
    run_dir: str,
    locustfile: str,
    api_key: str | None,
    sim: Any,
    watch: Any,
    lengths: LengthModel | None = None,
    headers: dict[str, str] | None = None,
) -> int:
    """Start the master and `a.processes.workers` local workers on `locustfile`, wait for the run, summarise it; its exit
    code. `sim`: the embedded simulator (or None); `watch`: see orchestration.commands.run.run; `lengths`: the
    preflight's prompt-length calibration; `headers`: every request's (--header, the host's userinfo, the key)."""
    from orchestration.server.gpu_scrape import gpu_samplers
    from orchestration.server.metrics_sampler import ServerMetricsSampler, scrape_targets
    from vllm_users.client.endpoints import primary_host

    port = a.processes.master_port or free_port()
    # several endpoints: the first one's /metrics, unless --server-metrics names each replica's own
    targets = scrape_targets(a.scrape, primary_host(host), headers or {})
    metrics_headers = targets[0][1]
    # credentials travel in the environment, never on a command line (`ps` shows those to every user)
    extra = {METRICS_HEADERS_ENV: json.dumps(metrics_headers)} if metrics_headers else {}
    more = {url: h for url, h in targets[1:] if h}  # each further /metrics URL's own headers
    if more:
        extra[METRICS_HEADERS_MORE_ENV] = json.dumps(more)
    shipped = without_api_key(headers or {}, api_key)  # the key has its own variable
    if shipped:
        extra[env_name("extra_headers")] = headers_json(shipped)
    env = C.child_env(api_key, extra)
    py = [sys.executable, "-m", "locust"]
    margs = locust_args(
        a, host, model, run_dir, locustfile, port, embedded_sim=sim is not None, lengths=lengths
    )
    known = Redactor(secret_values(headers or {}, api_key))  # e.g. a key repeated inside --sim-args
    with open(R.path(run_dir, R.COMMAND), "w") as fh:
        json.dump(
            {"argv": _redact(sys.argv[1:], known), "locust_master": _redact(margs, known)}, fh, indent=1
        )
    samplers = []
    if not a.scrape.no_server_metrics:  # background threads here, started before load and stopped after it
        samplers = [  # one per URL, on this process's clock: one time axis for every replica and the client
            ServerMetricsSampler(url, R.path(run_dir, R.server_metrics_name(i)), headers=h)
            for i, (url, h) in enumerate(targets)
        ]
        for sampler in samplers:
            sampler.start()
    gpus, lines = gpu_samplers(a.gpu, run_dir)
    for line in lines:  # a warning, --quiet or not: the run goes on without what the user asked for
        print(f"vllm-locust: warning: {line}", file=sys.stderr, flush=True)
    samplers += gpus
    master_log = open(R.path(run_dir, R.MASTER_OUT), "w")
    # own session (Ctrl-C is forwarded, so results get written), but SIGTERM when we die, however we die;
    # workers follow a silent master by themselves (VLLM_LOCUST_MASTER_TIMEOUT)
    master = subprocess.Popen(
        py + margs,
        env=env,
        stdout=master_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGTERM),
    )
    workers = []
    for i in range(a.processes.workers or 0):
        wlog = open(R.path(run_dir, R.WORKER_OUT.format(i)), "w")
        wargs = [
            "-f",
            locustfile,
            "--worker",
            "--master-host",
            "127.0.0.1",
            "--master-port",
            str(port),
            "--loglevel",
            "INFO",
        ]
        workers.append(
            subprocess.Popen(
                py + wargs, env=env, stdout=wlog, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
    with open(R.path(run_dir, R.PIDS), "w") as fh:
        json.dump({"master": master.pid, "workers": [w.pid for w in workers], "master_port": port}, fh)
    say(a.outputs, f"run {run_dir}: master + {a.processes.workers} worker(s) against {host} (model {model})")
    finished = False
    if a.processes.web_ui:
        say(
            a.outputs,
            f"web UI at http://{a.processes.web_host}:{a.processes.web_port} (start the swarm there; Ctrl-C to end)",
        )
        if a.load.run_time:
            say(a.outputs, f"--run-time {a.load.run_time:g}s counts from the first swarm started in the UI")

        def finished_in_ui() -> None:  # the test stopped in the UI: results, summary and report now
            nonlocal finished
            finished = True
            _finish(a, run_dir, None, False)
            say(a.outputs, "the web UI stays up to look at the results; Ctrl-C to end")

        interrupted = _wait(a, master, run_dir, watch, finished_in_ui)
    else:
        interrupted = _wait(a, master, run_dir, watch)
    for w in workers:
        try:
            w.wait(timeout=15)
        except subprocess.TimeoutExpired:
            w.kill()
    for sampler in samplers:
        sampler.stop()
        say(a.outputs, sampler.status())
    if finished:  # already summarised and reported when the test stopped in the UI
        return _exit_code(run_dir, master.returncode)
    return _finish(a, run_dir, master.returncode, interrupted)


def _exit_code(run_dir: str, master_rc: int | None) -> int:
    res = load_result(run_dir)
    return exit_codes.ABORTED if res is None else _code_of(res, master_rc)


def _code_of(res: RunResult, master_rc: int | None) -> int:
    """The run's exit code as the master wrote it (the master's own rc when the result lacks one)."""
    return res.exit_code if res.exit_code is not None else master_rc or 0


HEADER_FLAGS = (flag("header"), flag("metrics_header"))  # 'Name: value': a credential's value is masked


def _redact(argv: list[str], known: Redactor) -> list[str]:
    """The command line as command.json keeps it: secret options' values, credentials and userinfo masked."""
    secret = tuple(flag(n) for n, spec in SPECS.items() if spec.secret and flag(n) not in HEADER_FLAGS)
    return [known.text(x) for x in redact_argv(argv, secret, HEADER_FLAGS)]


def _wait(
    a: Options, master: subprocess.Popen[bytes], run_dir: str, watch: Any, on_result: Any = None
) -> bool:
    """Wait for the master, printing progress; forward Ctrl-C/SIGTERM so results get written.
    `on_result` (web UI) is called once when the result file appears while the master keeps running. True when a
    signal cut the run short; a signal after the result was written (the web UI kept up to look at it) only ends
    the master, and the run stays a clean one: no interrupted.json beside its exit 0."""
    interrupted = signalled = False

    def stop(signum: int, _frame: Any) -> None:
        nonlocal interrupted, signalled
        if signalled:
            return
        signalled = True
        if os.path.exists(result_path(run_dir)):
            print("\nvllm-locust: ending the web UI (the run's results are written)", flush=True)
        else:
            interrupted = True
            try:  # the master records which signal stopped the run (it gets SIGTERM whichever we got)
                atomic_json(R.path(run_dir, R.INTERRUPTED), {"signal": signal.Signals(signum).name})
            except OSError:
                pass
            print(
                "\nvllm-locust: stopping (in-flight streams get --stop-timeout); writing results...",
                flush=True,
            )
        master.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    last = ""
    stopped_early = False
    total = requests_total(a)  # `ok 27/200`: completed of the run's requests, where known
    try:
        while master.poll() is None:
            time.sleep(0.5)
            if on_result is not None and not signalled and os.path.exists(result_path(run_dir)):
                on_result()
                on_result = None
            if watch is not None and not stopped_early:
                reason = watch(_read_progress(run_dir) or {})
                if reason:
                    stopped_early = True
                    atomic_json(R.path(run_dir, R.EARLY_STOP), {"reason": reason})
                    say(a.outputs, f"stopping the step early: {reason}")
                    master.send_signal(signal.SIGTERM)
            line = _progress_line(run_dir, total)
            if line and line != last and not a.outputs.quiet:
                print(line, flush=True)
                last = line
        if signalled:  # the master drains, stops --profile's profiler (traces take minutes on CPU), writes
            master.wait(
                timeout=a.measure.stop_timeout + 60 + (PROFILE_STOP_TIMEOUT_S if a.capacity.profile else 0)
            )
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return interrupted


def _read_progress(run_dir: str) -> dict[str, Any] | None:
    p = R.read_json_or_none(run_dir, R.PROGRESS)
    return dict(p) if isinstance(p, dict) else None


def _progress_line(run_dir: str, total: int | None = None) -> str:
    p = _read_progress(run_dir)
    return "" if p is None else progress_line(p, total)


def _finish(a: Options, run_dir: str, master_rc: int | None, interrupted: bool) -> int:
    """Summary, --output-file, report and --print-result of the result the master wrote (it is read, never
    rewritten: the master built it once, vllm_users.distributed.run_end)."""
    res = load_result(run_dir)
    if res is None:
        print(f"vllm-locust: error: {no_result_line(run_dir, master_rc)}", file=sys.stderr)
        # a disk too full for even the room held for the end files: still the documented full-disk code
        return exit_codes.WRITE_FAILED if _disk_full(run_dir) is not None else exit_codes.ABORTED
    doc = res.to_json()
    if res.profile is not None:
        say(a.outputs, profile_line(res.profile))
    print(format_summary(doc, run_dir), flush=True)
    if a.outputs.output_file:
        os.makedirs(os.path.dirname(os.path.abspath(a.outputs.output_file)), exist_ok=True)
        shutil.copyfile(result_path(run_dir), a.outputs.output_file)
    if not a.outputs.no_report:
        _report(run_dir)
    code = _code_of(res, master_rc)
    if a.outputs.print_result:
        print(RESULT_LINE_PREFIX + json.dumps(doc, separators=(",", ":")), flush=True)
    reason = no_completed_reason(res)
    if (
        reason and not interrupted
    ):  # the run failed: its one-line reason, last (the summary said what it could)
        print(f"vllm-locust: error: {reason}", file=sys.stderr, flush=True)
    if res.meta.get("write_error"):  # a full disk: the run stopped early
        print(
            f"vllm-locust: error: {res.meta['write_error']}; the run stopped, what was written is kept",
            file=sys.stderr,
            flush=True,
        )
    raised = summary_line(list(res.meta.get("user_errors") or []))
    if raised:  # the user's bug, by type, message and line: the last line (Locust's CSV lacks the type)
        print(f"vllm-locust: error: {raised}", file=sys.stderr, flush=True)
    if interrupted:
        return exit_codes.INTERRUPTED
    return code


def _disk_full(run_dir: str) -> int | None:
    """The bytes free on the disk of `run_dir` when it is full as far as a run is concerned (FULL_DISK_BYTES),
    else None."""
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return None
    return free if free < FULL_DISK_BYTES else None


def no_result_line(run_dir: str, master_rc: int | None) -> str:
    """Why there is no result.json, in one line: a full disk where that is why, else the master's exit and log."""
    free = _disk_full(run_dir)
    if free is not None:
        return (
            f"the disk holding {run_dir} is full ({free} bytes free): the master could not write the results; "
            "what reached the disk is kept there"
        )
    return f"the master exited ({master_rc}) without writing results; see {R.path(run_dir, R.MASTER_LOG)}"


def _report(run_dir: str) -> None:
    try:
        from orchestration.report.generate import report_after_run
    except ImportError:
        return
    report_after_run(run_dir)
