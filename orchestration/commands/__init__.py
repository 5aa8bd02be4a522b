"""The `vllm-locust` subcommands: one module per subcommand, each with `main(argv) -> int` (orchestration.cli's
table names them).

A command raises what goes wrong (a vllm_users.errors.VllmLocustError, or Ctrl-C); `reported` is where that
becomes errors.report's one line on stderr and its exit code, so no command maps errors to codes by hand.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from vllm_users import errors

__all__ = ["Main", "reported"]

Main = Callable[[Sequence[str]], int]  # a command's entry: argv (after its name) -> exit code


def reported(prog: str) -> Callable[[Main], Main]:
    """Decorate a command's `main`: a VllmLocustError or Ctrl-C it raises becomes `prog: error: <message>` (one
    line, errors.report) and that error's exit code; argparse's exit (bad flag, --help) becomes its code."""

    def wrap(main: Main) -> Main:
        @functools.wraps(main)
        def reporting(argv: Sequence[str]) -> int:
            try:
                return int(main(argv) or 0)
            except (errors.VllmLocustError, KeyboardInterrupt) as e:
                return errors.report(e, prog)
            except SystemExit as e:  # argparse: exit 2 after its one line on a bad flag, 0 after --help
                return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)

        return reporting

    return wrap
