"""`vllm-locust run`: preflight, a Locust master plus N worker processes, progress, summary, results."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from orchestration import config as C
from orchestration import presets
from orchestration.capacity.flags import validate as capacity_validate
from orchestration.capacity.run_hooks import multi_run
from orchestration.preflight import PreflightError, check_server
from orchestration.summary import format_summary
from vllm_sim.launch import die_with_parent
from vllm_users import exit_codes
from vllm_users.atomic import atomic_json
from vllm_users.distributed.server_profile import STOP_TIMEOUT_S as PROFILE_STOP_TIMEOUT_S
from vllm_users.distributed.server_profile import profile_line
from vllm_users.measure.run_result import RunResult, load_result, result_path
from vllm_users.options import RUN, SPECS, Options, env_api_key, flag, locust_argv
from vllm_users.scenarios.registry import is_class_ref, locustfile_source, mix_label, parse_mix

DEFAULT_NUM_PROMPTS = 200  # when neither --num-prompts nor --run-time is given
RESULT_LINE_PREFIX = "VLLM_LOCUST_RESULT "  # --print-result: this, then the result JSON on one line
DEFAULT_OPEN_LOOP_SLOTS = 256  # users (max in flight) for open loop without --max-concurrency


def new_run_parser(prog: str) -> argparse.ArgumentParser:
    """A stand-alone parser of `vllm-locust run`'s flags (for commands that take the same options)."""
    run_parser = add_run_parser(C.OneLineParser(prog=prog).add_subparsers())
    run_parser.__class__ = C.OneLineParser
    run_parser.prog = prog
    return run_parser


def run_options(argv: list[str]) -> Options:
    """`vllm-locust run`'s options from argv, --config, env and --preset, as the master sees them (UsageError
    when bad)."""
    return C.parse_options(new_run_parser("vllm-locust run"), argv, RUN)


def add_run_parser(sub: Any) -> argparse.ArgumentParser:
    """Register `run` and its flags."""
    p = sub.add_parser("run", help="Run a load test (against the embedded simulator when no --host)")
    C.add_options(p, RUN, {"preset": sorted(presets.PRESETS)})
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if done.returncode != 0:
        lines = [x for x in done.stderr.splitlines() if x.strip()]
        msg = lines[-1].removeprefix("error: ") if lines else f"checking the user classes failed ({done.returncode})"
        raise C.UsageError(msg)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def validate(a: Options) -> tuple[Options, list[tuple[str, int]], list[str]]:
    """Cross-option checks (UsageError with one line); the options with the run's choices filled in, the user
    mix and the locustfiles."""
    mix, files = resolve_users(a.scenario, a.locustfile)
    a = presets.prepare(a, [n for n, _ in mix])  # scenario defaults; dataset, schema and tokenizer checked
    a = capacity_validate(a)
    if a.request_rate is not None and a.users is not None:
        raise C.UsageError("--users is for closed loop and --request-rate for open loop: give one of them")
    if a.max_concurrency is not None and a.request_rate is None and a.users is not None:
        raise C.UsageError("--max-concurrency caps an open-loop run: use it with --request-rate (or use --users)")
    if a.request_rate is not None and math.isinf(a.request_rate) and a.num_prompts is None:
        raise C.UsageError("--request-rate inf needs --num-prompts")
    if a.host and not a.host.startswith(("http://", "https://")):
        raise C.UsageError(f"--host {a.host!r}: expected a URL like http://127.0.0.1:8000")
    if a.num_prompts is None and a.run_time is None:
        a = dataclasses.replace(a, num_prompts=DEFAULT_NUM_PROMPTS)
    if a.workers is None:
        a = dataclasses.replace(a, workers=max(1, os.cpu_count() or 1))
    if a.workers == 0 and not a.expect_workers:
        raise C.UsageError("--workers 0 needs --expect-workers N (remote workers)")
    return a, mix, files


def locust_args(a: Options, host: str, model: str, run_dir: str, locustfile: str, port: int,
                embedded_sim: bool = False) -> list[str]:  # fmt: skip
    """Master command line (`embedded_sim`: the host is our simulator; the result cross-checks its count)."""
    open_loop = a.request_rate is not None
    if open_loop:
        users = a.max_concurrency or DEFAULT_OPEN_LOOP_SLOTS
    else:
        users = a.users or a.max_concurrency or 8
    args = [
        "-f", locustfile, "--master", "--master-bind-host", a.master_bind_host, "--master-bind-port", str(port),
        "--expect-workers", str(a.expect_workers or a.workers), "--expect-workers-max-wait", "120", "--host", host,
        "-u", str(users), "-r", str(a.spawn_rate or users * 4),  # default: every user within ~0.25 s, like vllm bench
        "--csv", os.path.join(run_dir, "locust"), "--csv-full-history",
        "--html", os.path.join(run_dir, "locust_report.html"),
        "--stop-timeout", f"{int(math.ceil(a.stop_timeout)) + 5}s", "--loglevel", "INFO",
        "--logfile", os.path.join(run_dir, "master.log"), "--only-summary",
    ]  # fmt: skip
    if a.web_ui:
        args += ["--web-port", str(a.web_port), "--web-host", a.web_host]
        if a.web_login:
            args += ["--web-login"]
    else:
        args += ["--headless"]
    if a.run_time:
        args += ["--run-time", f"{int(math.ceil(a.run_time))}s"]
    set_by_run: dict[str, Any] = {"results_dir": run_dir, "model": model, "vllm_embedded_sim": embedded_sim}
    if not open_loop:
        set_by_run["max_concurrency"] = None  # closed loop: it only chose the users
    if a.header:
        hdrs = {h.partition(":")[0].strip(): h.partition(":")[2].strip() for h in a.header}
        set_by_run["extra_headers"] = json.dumps(hdrs)
    return args + locust_argv(a, **set_by_run)


def run(a: Options, watch: Callable[[dict[str, Any]], str | None] | None = None) -> int:
    """Execute `vllm-locust run`; returns the exit code. `watch` (--find-max-rate's steps) reads the progress
    and names a reason to stop the run early."""
    code = multi_run(a, run, lambda o: validate(o)[0])  # --find-max-rate, --sweep, --repeats: several runs
    if code is not None:
        return code
    a, mix, files = validate(a)
    api_key = a.api_key or env_api_key()
    names = mix_label(mix, files)
    run_dir = os.path.join(a.output_dir, a.run_name or f"{time.strftime('%Y%m%d-%H%M%S')}-{names}")
    if os.path.exists(result_path(run_dir)):
        raise C.UsageError(f"run directory {run_dir} already holds a result; choose another --run-name")
    os.makedirs(run_dir, exist_ok=True)
    sim = None
    try:
        host = a.host
        if not host:
            from vllm_sim.launch import start_simulator

            sim_args = a.sim_args.split() if a.sim_args else []
            if api_key and "--api-key" not in sim_args:
                sim_args += ["--api-key", api_key]
            sim = start_simulator(sim_args)
            host = sim.url
            _say(a, f"embedded simulator at {host} (pid {sim.pid})")
        try:
            info = check_server(host, a.model or None, api_key, a.endpoint)
        except PreflightError as e:
            print(f"vllm-locust: error: {e}", file=sys.stderr)
            return exit_codes.PREFLIGHT
        with open(os.path.join(run_dir, "preflight.json"), "w") as fh:
            json.dump({"model": info.model, "models": info.models, "stream_attempts": info.attempts}, fh)
        locustfile = os.path.join(run_dir, "locustfile.py")
        with open(locustfile, "w") as fh:
            fh.write(locustfile_source(mix, files))
        return _launch(a, host, info.model, run_dir, locustfile, api_key, sim, watch)
    finally:
        if sim is not None:
            sim.stop()


def _say(a: Options, msg: str) -> None:
    if not a.quiet:
        print(f"vllm-locust: {msg}", flush=True)


def _launch(a: Options, host: str, model: str, run_dir: str, locustfile: str,
            api_key: str | None, sim: Any, watch: Any) -> int:  # fmt: skip
    port = a.master_port or _free_port()
    env = C.child_env(api_key)
    py = [sys.executable, "-m", "locust"]
    margs = locust_args(a, host, model, run_dir, locustfile, port, embedded_sim=sim is not None)
    with open(os.path.join(run_dir, "command.json"), "w") as fh:
        json.dump({"argv": _redact(sys.argv[1:]), "locust_master": _redact(margs)}, fh, indent=1)
    sampler = None
    if not a.no_server_metrics:  # a background thread here, started before load and stopped after it
        from orchestration.server_metrics import SERVER_METRICS_FILE, ServerMetricsSampler

        sampler = ServerMetricsSampler(a.server_metrics or host.rstrip("/") + "/metrics",
                                       os.path.join(run_dir, SERVER_METRICS_FILE))  # fmt: skip
        sampler.start()
    master_log = open(os.path.join(run_dir, "master.out"), "w")
    # own session (Ctrl-C is forwarded, so results get written), but SIGTERM when we die, however we die;
    # workers follow a silent master by themselves (VLLM_LOCUST_MASTER_TIMEOUT)
    master = subprocess.Popen(py + margs, env=env, stdout=master_log, stderr=subprocess.STDOUT, start_new_session=True,
                              preexec_fn=die_with_parent(signal.SIGTERM))  # fmt: skip
    workers = []
    for i in range(a.workers or 0):
        wlog = open(os.path.join(run_dir, f"worker-{i}.out"), "w")
        wargs = ["-f", locustfile, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port),
                 "--loglevel", "INFO"]  # fmt: skip
        workers.append(subprocess.Popen(py + wargs, env=env, stdout=wlog, stderr=subprocess.STDOUT, start_new_session=True))
    with open(os.path.join(run_dir, "pids.json"), "w") as fh:
        json.dump({"master": master.pid, "workers": [w.pid for w in workers], "master_port": port}, fh)
    _say(a, f"run {run_dir}: master + {a.workers} worker(s) against {host} (model {model})")
    finished = False
    if a.web_ui:
        _say(a, f"web UI at http://{a.web_host}:{a.web_port} (start the swarm there; Ctrl-C to end)")
        if a.run_time:
            _say(a, f"--run-time {a.run_time:g}s counts from the first swarm started in the UI")

        def finished_in_ui() -> None:  # the test stopped in the UI: results, summary and report now
            nonlocal finished
            finished = True
            _finish(a, run_dir, None, False)
            _say(a, "the web UI stays up to look at the results; Ctrl-C to end")

        interrupted = _wait(a, master, run_dir, watch, finished_in_ui)
    else:
        interrupted = _wait(a, master, run_dir, watch)
    for w in workers:
        try:
            w.wait(timeout=15)
        except subprocess.TimeoutExpired:
            w.kill()
    if sampler is not None:
        sampler.stop()
        _say(a, sampler.status())
    if finished:  # already summarised and reported when the test stopped in the UI
        return _exit_code(run_dir, master.returncode)
    return _finish(a, run_dir, master.returncode, interrupted)


def _exit_code(run_dir: str, master_rc: int | None) -> int:
    res = load_result(run_dir)
    return exit_codes.ABORTED if res is None else _code_of(res, master_rc)


def _code_of(res: RunResult, master_rc: int | None) -> int:
    """The run's exit code as the master wrote it (the master's own rc when the result lacks one)."""
    return res.exit_code if res.exit_code is not None else master_rc or 0


def _redact(argv: list[str]) -> list[str]:
    secret = tuple(flag(n) for n, spec in SPECS.items() if spec.secret)  # may carry credentials
    out, skip = [], False
    for x in argv:
        if skip:
            out.append("***")
            skip = False
        elif x in secret:
            out.append(x)
            skip = True
        elif x.startswith(tuple(f + "=" for f in secret)):
            out.append(x.split("=", 1)[0] + "=***")
        else:
            out.append(x)
    return out


def _wait(a: Options, master: subprocess.Popen, run_dir: str, watch: Any,
          on_result: Any = None) -> bool:  # fmt: skip
    """Wait for the master, printing progress; forward Ctrl-C/SIGTERM so results get written.
    `on_result` (web UI) is called once when result.json appears while the master keeps running."""
    interrupted = False

    def stop(signum: int, _frame: Any) -> None:
        nonlocal interrupted
        if not interrupted:
            interrupted = True
            print("\nvllm-locust: stopping (in-flight streams get --stop-timeout); writing results...", flush=True)
            master.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    last = ""
    stopped_early = False
    try:
        while master.poll() is None:
            time.sleep(0.5)
            if on_result is not None and not interrupted and os.path.exists(result_path(run_dir)):
                on_result()
                on_result = None
            if watch is not None and not stopped_early:
                reason = watch(_read_progress(run_dir) or {})
                if reason:
                    stopped_early = True
                    atomic_json(os.path.join(run_dir, "early_stop.json"), {"reason": reason})
                    _say(a, f"stopping the step early: {reason}")
                    master.send_signal(signal.SIGTERM)
            line = _progress_line(run_dir)
            if line and line != last and not a.quiet:
                print(line, flush=True)
                last = line
        if interrupted:  # the master drains, stops --profile's profiler (traces take minutes on CPU), writes
            master.wait(timeout=a.stop_timeout + 60 + (PROFILE_STOP_TIMEOUT_S if a.profile else 0))
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return interrupted


def _read_progress(run_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(run_dir, "progress.json")) as fh:
            return dict(json.load(fh))
    except (OSError, ValueError):
        return None


def _progress_line(run_dir: str) -> str:
    p = _read_progress(run_dir)
    if p is None:
        return ""
    lat = "  ".join(f"{k.replace('_ms', '')} {v:.1f}ms" for k, v in p.items() if k.endswith("_ms"))
    lost = f"  LOST {','.join(p['workers_lost'])}" if p.get("workers_lost") else ""
    return (f"[{p['elapsed_s']:7.1f}s] ok {int(p['ok'])}  failed {int(p['failed'])}  in-flight {int(p['inflight'])}  "
            f"{p['output_tok_per_s']:.0f} tok/s  {lat}{lost}")  # fmt: skip


def _finish(a: Options, run_dir: str, master_rc: int | None, interrupted: bool) -> int:
    """Summary, --output-file, report and --print-result of the result the master wrote (it is read, never
    rewritten: the master built it once, vllm_users.distributed.run_end)."""
    res = load_result(run_dir)
    if res is None:
        print(f"vllm-locust: error: the master exited ({master_rc}) without writing results; see {run_dir}/master.log",
              file=sys.stderr)  # fmt: skip
        return exit_codes.ABORTED
    doc = res.to_json()
    if res.profile is not None:
        _say(a, profile_line(res.profile))
    print(format_summary(doc, run_dir), flush=True)
    if a.output_file:
        os.makedirs(os.path.dirname(os.path.abspath(a.output_file)), exist_ok=True)
        shutil.copyfile(result_path(run_dir), a.output_file)
    if not a.no_report:
        _report(run_dir)
    code = _code_of(res, master_rc)
    if a.print_result:
        print(RESULT_LINE_PREFIX + json.dumps(doc, separators=(",", ":")), flush=True)
    if interrupted:
        return exit_codes.INTERRUPTED
    return code


def _report(run_dir: str) -> None:
    try:
        from orchestration.report import cli as report_cli  # type: ignore[attr-defined]
    except ImportError:
        return
    report_cli.report_after_run(run_dir)
