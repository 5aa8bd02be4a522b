"""`vllm-locust sweep-server --serve-cmd "vllm serve …" --param max-num-batched-tokens=2048,8192 [--param …]
--host URL [run options]`: for each point of the parameter grid, start the server, wait for /health, run the
same load, stop the server by its process group; one sweep.json and one report.

`--param NAME=V1,V2` appends `--NAME V` to the serve command; `--param env:NAME=V1,V2` sets the environment
variable NAME (e.g. VLLM_CPU_KVCACHE_SPACE). Every point records its startup time; a server that exits or
never answers /health is a point with `started: false` and the log's tail, not an abort.
The command line itself (its flags, then every `vllm-locust run` flag) is orchestration.commands.sweep_server.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestration.capacity.steps import (
    CONSOLE,
    SERVER_POINTS,
    RunOne,
    StepRunner,
    summarize_step,
    write_output_file,
)
from orchestration.capacity.sweep import format_sweep
from vllm_users import exit_codes
from vllm_users.atomic import atomic_json
from vllm_users.client import stdlib_http
from vllm_users.options import Options, env_api_key
from vllm_users.redact import (
    Redactor,
    connection_headers,
    header_lines,
    redact_argv,
    redact_url,
    secret_values,
)
from vllm_users.run_dir import SERVER_LOG, SWEEP

__all__ = ["Param", "ServerProcess", "grid", "parse_param", "run_server_sweep"]


@dataclass(frozen=True)
class Param:
    """One swept setting: a serve-command flag (`--name value`) or an environment variable."""

    name: str
    values: tuple[str, ...]
    env: bool = False


def parse_param(text: str) -> Param:
    """`max-num-batched-tokens=2048,8192` or `env:VLLM_CPU_KVCACHE_SPACE=1,2`."""
    name, sep, vals = text.partition("=")
    env = name.startswith("env:")
    name = name.removeprefix("env:").strip().removeprefix("--")
    values = tuple(v.strip() for v in vals.split(",") if v.strip())
    if not sep or not values or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=V1,V2 or env:NAME=V1,V2")
    return Param(name, values, env)


def grid(params: Sequence[Param]) -> list[list[tuple[Param, str]]]:
    """Every combination of the parameters' values, the first parameter varying slowest."""
    return [list(zip(params, combo, strict=True)) for combo in itertools.product(*(p.values for p in params))]


def _label(point: list[tuple[Param, str]]) -> str:
    return ",".join(f"{'env:' if p.env else ''}{p.name}={v}" for p, v in point)


def shown_cmd(argv: list[str], api_key: str | None = None) -> str:
    """The server's command line as sweep.json and its log show it: `--api-key`'s value (vllm serve's) masked,
    the run's API key (`api_key`, else the environment's) wherever it appears, and every URL's userinfo."""
    known = Redactor(secret_values(api_key=api_key or env_api_key()))
    return known.text(shlex.join(redact_argv(argv, ("--api-key",))))


class ServerProcess:
    """The server under test, in its own process group (stopped by PID: SIGTERM, then SIGKILL to the group)."""

    def __init__(
        self, argv: list[str], env: dict[str, str], log_path: str, api_key: str | None = None
    ) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            log.write(("$ " + shown_cmd(argv, api_key) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def wait_healthy(
        self, url: str, timeout: float, headers: Mapping[str, str] | None = None, api_key: str | None = None
    ) -> tuple[bool, float, str]:
        """(healthy, seconds waited, why not); `headers`: the run's (--header, the key, the URL's userinfo)."""
        url, auth = connection_headers(url, headers, api_key or env_api_key())
        req = urllib.request.Request(url.rstrip("/") + "/health", headers=auth)
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                return (
                    False,
                    time.monotonic() - t0,
                    f"the server exited with {self.proc.returncode} before /health answered",
                )
            try:
                with stdlib_http.urlopen(req, timeout=2) as r:  # interim 1xx skipped
                    if r.status == 200:
                        return True, time.monotonic() - t0, ""
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() - t0 > timeout:
                return False, time.monotonic() - t0, f"/health did not answer within {timeout:g} s"
            time.sleep(0.5)

    def stop(self, grace: float) -> None:
        """SIGTERM the process group, SIGKILL it after `grace` s (engine children included)."""
        pgid = self.proc.pid  # start_new_session: the group id is the PID
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            if sig == signal.SIGTERM:
                try:
                    os.killpg(pgid, signal.SIGKILL)  # the leader is gone; children may not be
                except ProcessLookupError:
                    pass
                break

    def log_tail(self, n: int = 30) -> str:
        """The last lines of the server's log."""
        try:
            with open(self.log_path, errors="replace") as fh:
                return "\n".join(fh.read().splitlines()[-n:])
        except OSError:
            return ""


def run_server_sweep(own: argparse.Namespace, a: Options, run_one: RunOne) -> int:
    """Every grid point: start, wait for /health, run the load, stop; write sweep.json and the report."""
    runner = StepRunner(a, run_one, SERVER_POINTS)
    base = runner.base
    steps: list[dict[str, Any]] = []
    points = grid(own.param)
    # SIGTERM outside a load (e.g. while a server starts) must still stop the server, which runs in its own
    # session and would outlive us: raise like Ctrl-C so `finally` stops it (run's own handler covers the load)
    old_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        worst = _sweep_points(own, a, runner, points, steps)
    except KeyboardInterrupt:
        print("\nvllm-locust: interrupted; the server is stopped, the points so far are written", flush=True)
        worst = exit_codes.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, old_term)
    doc = {
        "kind": "server_sweep",
        "sweep": "sweep-server",
        "host": redact_url(a.server.host),
        "serve_cmd": shown_cmd(shlex.split(own.serve_cmd), a.server.api_key),
        "params": [{"name": p.name, "env": p.env, "values": list(p.values)} for p in own.param],
        "steps": steps,
    }
    if a.capacity.gpu_hour_price:
        from orchestration.capacity.cost import add_step_costs

        add_step_costs(steps, a.capacity.gpu_hour_price, a.capacity.gpus)
    atomic_json(os.path.join(base, SWEEP), doc)
    write_output_file(a.outputs, doc)
    print(
        format_sweep(doc, base), flush=True
    )  # each point's startup and a failed start's error are in its table
    if not a.outputs.no_report:
        from orchestration.report.sweep_report import rewrite_report

        print(f"vllm-locust: server sweep report {rewrite_report(base)}", flush=True)
    failed = sum(not s["started"] for s in steps)
    return max(worst, exit_codes.FAILURES if failed else 0)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _sweep_points(
    own: argparse.Namespace,
    a: Options,
    runner: StepRunner,
    points: list[list[tuple[Param, str]]],
    steps: list[dict[str, Any]],
) -> int:
    """Run every point (appending its row to `steps`); the worst exit code."""
    worst = 0
    for i, point in enumerate(points, 1):
        label = _label(point)
        name = SERVER_POINTS.name(i, label)
        run_dir = runner.path(name)
        os.makedirs(run_dir, exist_ok=True)
        argv = shlex.split(own.serve_cmd)
        env = dict(os.environ)
        for p, v in point:
            if p.env:
                env[p.name] = v
            else:
                argv += [f"--{p.name}", v]
        print(f"vllm-locust: point {i}/{len(points)}: {label}: starting the server", flush=True)
        server = ServerProcess(argv, env, os.path.join(run_dir, SERVER_LOG), a.server.api_key)
        try:
            ok, startup, why = server.wait_healthy(
                a.server.host, own.health_timeout, header_lines(a.request.header), a.server.api_key
            )
            row: dict[str, Any]
            if ok:
                print(f"vllm-locust: point {i}: healthy after {startup:.1f} s; running the load", flush=True)
                code = runner.step(a.server.host, i, label, console=CONSOLE).code
                worst = max(worst, code)
                row = summarize_step(name, "server", None, run_dir, code)
            else:
                print(f"vllm-locust: point {i}: failed to start: {why}", flush=True)
                row = {
                    "name": name,
                    "kind": "server",
                    "target": None,
                    "run_dir": run_dir,
                    "exit_code": None,
                    "error": why,
                    "log_tail": server.log_tail(),
                }
            row.update(
                label=label,
                params={("env:" if p.env else "") + p.name: v for p, v in point},
                started=ok,
                startup_s=round(startup, 3),
                verdict="ran" if ok else "failed start",
            )
        finally:
            server.stop(own.stop_grace)
        row["server_exit_code"] = server.proc.returncode
        steps.append(row)
        if row.get("exit_code") == exit_codes.INTERRUPTED:
            break  # Ctrl-C: no further point
    return worst
