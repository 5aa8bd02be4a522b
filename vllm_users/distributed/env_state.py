"""What a process's Locust Environment holds for vllm-locust: the typed options and the worker-side context."""

from __future__ import annotations

from typing import Any

from locust.env import Environment

from vllm_users.distributed.worker_side import WorkerContext
from vllm_users.options import Options, from_namespace

__all__ = ["context", "locust_option", "options"]


def _context_or_none(env: Environment) -> WorkerContext | None:
    """The worker-side context of this process, or None before the test started."""
    ctx: WorkerContext | None = vars(env).get("vllm_ctx")
    return ctx


def context(env: Environment) -> WorkerContext:
    """The worker-side context of this process (created at test start)."""
    ctx = _context_or_none(env)
    if ctx is None:
        raise RuntimeError("vllm-locust context missing: was the test started?")
    return ctx


def options(env: Environment) -> Options:
    """This process's typed, frozen options (built from Locust's parsed options at init and at each test start)."""
    o: Options | None = vars(env).get("vllm_options")
    if o is None:
        o = env.vllm_options = from_namespace(env.parsed_options)  # type: ignore[attr-defined]
    return o


def locust_option(env: Environment, name: str) -> Any:
    """One of Locust's own options (num_users, run_time, headless, html_file); None without a command line."""
    return None if env.parsed_options is None else vars(env.parsed_options).get(name)
