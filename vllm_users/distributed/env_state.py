"""What a process's Locust Environment holds for vllm-locust: the typed options, the worker-side context and
(master or local runner) the master's plugin.

This module is the only writer of that state: one typed object under one attribute of the Environment (which
Locust hands to every listener and user, so the state travels with it), read and written by every other
module through the functions below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from locust.env import Environment

from vllm_users.distributed.transport.messages import ToMaster
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.options import Options, from_namespace

# the master's (or local runner's) handler of worker messages: handle(message, sender's node id)
MessageHandler = Callable[[ToMaster, str], None]

__all__ = [
    "MessageHandler",
    "context",
    "context_or_none",
    "locust_option",
    "master_handler",
    "options",
    "refresh_options",
    "set_context",
    "set_master_handler",
]

_ATTR = "vllm_locust"  # the one attribute of the Environment that vllm-locust sets


@dataclass(slots=True)
class _State:
    """vllm-locust's state in one process's Environment."""

    options: Options | None = (
        None  # rebuilt at init and at each test start (the web UI's form may change them)
    )
    context: WorkerContext | None = None  # a worker's (or the local runner's) run state, from test start on
    handler: MessageHandler | None = None  # the master's (or local runner's) message handler, from init on


def _state(env: Environment) -> _State:
    """This Environment's state, created on first use."""
    st: _State | None = vars(env).get(_ATTR)
    if st is None:
        st = _State()
        setattr(env, _ATTR, st)
    return st


def context_or_none(env: Environment) -> WorkerContext | None:
    """The worker-side context of this process, or None before the test started (and on a master)."""
    st: _State | None = vars(env).get(_ATTR)
    return None if st is None else st.context


def context(env: Environment) -> WorkerContext:
    """The worker-side context of this process (created at test start)."""
    ctx = context_or_none(env)
    if ctx is None:
        raise RuntimeError("vllm-locust context missing: was the test started?")
    return ctx


def set_context(env: Environment, ctx: WorkerContext) -> None:
    """Keep this test's worker-side context (test start)."""
    _state(env).context = ctx


def options(env: Environment) -> Options:
    """This process's typed, frozen options (built from Locust's parsed options at init and at each test start)."""
    st = _state(env)
    return st.options if st.options is not None else refresh_options(env)


def refresh_options(env: Environment) -> Options:
    """Rebuild the options from Locust's parsed options and keep them (ArgumentTypeError on a bad value)."""
    o = _state(env).options = from_namespace(env.parsed_options)
    return o


def master_handler(env: Environment) -> MessageHandler:
    """The master's (or local runner's) handler of worker messages (set at init): a local runner's worker
    side sends to it directly."""
    h = _state(env).handler
    if h is None:
        raise RuntimeError("vllm-locust master plugin missing: is this a master or a local runner?")
    return h


def set_master_handler(env: Environment, handler: MessageHandler) -> None:
    """Keep the master's message handler (init)."""
    _state(env).handler = handler


def locust_option(env: Environment, name: str) -> Any:
    """One of Locust's own options (num_users, run_time, headless, html_file); None without a command line."""
    return None if env.parsed_options is None else vars(env.parsed_options).get(name)
