"""`vllm-locust` command line: a table of subcommands, each a module of orchestration.commands with
`main(argv) -> int`, imported only when it runs (so `vllm-locust --help` loads none of them)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from orchestration.commands import Main, reported
from orchestration.settings import config as C
from vllm_users import errors, exit_codes

__all__ = ["COMMANDS", "PROG", "main", "parser"]

PROG = "vllm-locust"
COMMANDS: dict[str, tuple[str, str]] = {  # name -> (module with `main`, one-line help)
    "run": ("orchestration.commands.run", "Run a load test (against the embedded simulator when no --host)"),
    "sim": (
        "orchestration.commands.sim",
        "Run the embedded vLLM-compatible simulator (see `vllm-locust sim --help`)",
    ),
    "report": (
        "orchestration.commands.report",
        "Build reports from run directories (see `vllm-locust report --help`)",
    ),
    "gate": (
        "orchestration.commands.gate",
        "Fail CI on a regression beyond the noise (see `vllm-locust gate --help`)",
    ),
    "worker": (
        "orchestration.commands.worker",
        "Join a remote master as a worker (see `vllm-locust worker --help`)",
    ),
    "sweep-server": (
        "orchestration.commands.sweep_server",
        "Restart the server per parameter point, same load each (see --help)",
    ),
    "k8s": (
        "orchestration.commands.k8s",
        "Kubernetes manifests for a run (see `vllm-locust k8s render --help`)",
    ),
    "trace": (
        "orchestration.commands.trace",
        "Export a run as a replayable trace, or describe a trace file (--help)",
    ),
    "gpu-exporter": (
        "orchestration.commands.gpu_exporter",
        "Serve this host's GPUs (NVML) as Prometheus text for --gpu-metrics (see --help)",
    ),
    "calibrate": (
        "orchestration.commands.calibrate",
        "Probe a server (bounded) and write a simulator twin of it: twin.json (see --help)",
    ),
}


def parser() -> C.OneLineParser:
    """The top-level parser: it only lists the commands (each parses its own flags)."""
    p = C.OneLineParser(prog=PROG, description="Distributed load testing for vLLM, built on Locust")
    sub = p.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text)
    return p


def _command(name: str) -> Main:
    """The `main` of command `name`; UsageError when its module is not part of this build."""
    module = COMMANDS[name][0]
    try:
        found: Main = importlib.import_module(module).main
    except ModuleNotFoundError as e:
        if e.name != module:
            raise  # the command is here, something it imports is not: a broken install, shown as it is
        raise errors.UsageError(f"the {name} command is not available in this build") from None
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vllm-locust` console script: `vllm-locust COMMAND ARGS`; its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        name = argv[0]
        # a command reports its own errors under its own name (run's read `vllm-locust: error:`); this catches
        # what one raises without doing so
        return reported(f"{PROG} {name}")(lambda rest: _command(name)(rest))(argv[1:])
    top = parser()
    if argv:
        top.parse_args(
            argv
        )  # --help (exit 0), or a one-line error naming the unknown command or flag (exit 2)
    top.print_help()
    return exit_codes.USAGE


if __name__ == "__main__":
    sys.exit(main())
