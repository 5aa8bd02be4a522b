"""The one error hierarchy: every user-facing error is a `VllmLocustError` that carries its exit code.

A command raises; `report` (below) is the one place that turns the error into its one-line message on
stderr and its exit code (vllm_users.exit_codes). Errors that come from bad input stay `ValueError`s too,
so code that validates with `except ValueError` keeps working.
"""

from __future__ import annotations

import sys
from typing import TextIO

from vllm_users import exit_codes

__all__ = [
    "DatasetError",
    "PreflightError",
    "ReportError",
    "SchemaError",
    "TokenizerError",
    "TraceError",
    "UsageError",
    "UserClassError",
    "VllmLocustError",
    "report",
]


class VllmLocustError(Exception):
    """Base of every user-facing error: the message is one line naming the problem."""

    exit_code: int = exit_codes.USAGE


class UsageError(VllmLocustError, ValueError):
    """Bad input (flag, config file, option value): nothing was sent."""

    exit_code = exit_codes.USAGE


class DatasetError(UsageError):
    """A dataset file that cannot be read or has no usable prompt."""


class SchemaError(UsageError):
    """A JSON schema (json scenario) that is invalid or unsupported."""


class TokenizerError(UsageError):
    """A tokenizer (`--tokenizer`) that cannot be loaded or used."""


class UserClassError(UsageError):
    """A user class (`--scenario pkg.module:Class`, `-f FILE`) that cannot be loaded or is not an LLMUser."""


class TraceError(UsageError):
    """A trace file (`--trace`, `vllm-locust trace`) that cannot be read: `FILE:LINE: field 'F': ...` names where."""


class ReportError(UsageError):
    """A run directory that holds nothing reportable."""


class PreflightError(VllmLocustError):
    """The server cannot be load-tested as asked: nothing was sent."""

    exit_code = exit_codes.PREFLIGHT


def report(error: BaseException, prog: str = "vllm-locust", stream: TextIO | None = None) -> int:
    """Print `prog: error: <message>` (one line) for a user-facing error or Ctrl-C; return its exit code."""
    if isinstance(error, KeyboardInterrupt):
        return exit_codes.INTERRUPTED
    message = " ".join(str(error).split()) or type(error).__name__
    print(f"{prog}: error: {message}", file=stream or sys.stderr)
    return error.exit_code if isinstance(error, VllmLocustError) else exit_codes.USAGE
