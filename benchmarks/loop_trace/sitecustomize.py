"""Event-loop tracer for `bench_loop_lag.py --trace`: imported by every Python process whose PYTHONPATH holds this
folder, active only in Locust workers and only when BENCH_LOOP_TRACE is set (a path prefix).

Per loop iteration (libev: from the check watcher, after the poll, to the prepare watcher, before the next
poll) it times the work with the wall clock and with this thread's CPU clock. An iteration much longer in
wall time than in CPU time was the OS not running the process (a busy machine); one long in both is code
that held the loop. Each iteration over BENCH_LOOP_TRACE_MS (default 5) is written at exit with the greenlets
that ran longest in it, named by where they yielded: BENCH_LOOP_TRACE.<pid>, one JSON object a line.
It costs a few µs per iteration and per greenlet switch: use it to find what blocks, not for the figures.

Counts over the whole run (the file's last line, {"holds": ..., "calls": ...}): every greenlet run on the loop's
thread over BENCH_LOOP_HOLD_MS (default 0.5) by where it yielded (n, sum and max ms), and the prompt builders'
and the local tokenizer's calls (`ExactPrompts.get`, `RandomPrompts.get`, the `load_tokenizer` counter) by thread:
on the loop's thread each call holds the loop for its whole length; on another thread it does not.
"""

from __future__ import annotations

import atexit
import builtins
import json
import os
import sys
import time
import traceback
from typing import Any

_PREFIX = os.environ.get("BENCH_LOOP_TRACE", "")
_MIN_S = float(os.environ.get("BENCH_LOOP_TRACE_MS", "5")) / 1000.0
_HOLD_S = float(os.environ.get("BENCH_LOOP_HOLD_MS", "0.5")) / 1000.0


def _where(g: Any, limit: int = 6) -> str:
    f = getattr(g, "gr_frame", None)
    if f is None:
        return type(g).__name__
    st = traceback.extract_stack(f, limit=limit)
    return " < ".join(f"{os.path.basename(x.filename)}:{x.lineno}:{x.name}" for x in reversed(st))


def _count(table: dict[str, list[float]], key: str, ms: float, cpu_ms: float = float("nan")) -> None:
    n = table.setdefault(key, [0, 0.0, 0.0, 0.0])
    n[0] += 1
    n[1] += ms
    n[2] = max(n[2], ms)
    n[3] += cpu_ms  # the loop thread's CPU in it: wall far above it is the GIL or the OS, not this code


def _wrap_prompts(calls: dict[str, list[float]], ident: Any, main: int) -> None:
    """Time the prompt builders and the tokenizer counter, by thread (the loop's or another)."""
    import functools

    try:
        from vllm_users.workload import prompts, source
    except ImportError:
        return

    def timed(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def run(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                where = "loop" if ident() == main else "thread"
                _count(calls, f"{name} [{where}]", (time.perf_counter() - t0) * 1e3)

        return run

    builders = (
        (getattr(source, "ExactPrompts", None), "ExactPrompts.get"),
        (prompts.RandomPrompts, "RandomPrompts.get"),
    )
    for cls, name in builders:
        if cls is not None and "get" in cls.__dict__:
            setattr(cls, "get", timed(name, cls.__dict__["get"]))  # noqa: B010 - a method replaced on purpose
    load = getattr(source, "load_tokenizer", None)
    if load is not None:
        source.load_tokenizer = functools.cache(lambda path: timed("tokenizer call", load(path)))


def _install() -> None:
    import gevent
    import greenlet
    from gevent import monkey

    ident = monkey.get_original(
        "_thread", "get_ident"
    )  # the OS thread (threading's is a greenlet's when patched)
    main = ident()
    holds: dict[str, list[float]] = {}
    calls: dict[str, list[float]] = {}
    _wrap_prompts(calls, ident, main)
    spans: list[dict[str, Any]] = []
    st: dict[str, Any] = {"t": time.perf_counter(), "c": time.thread_time(), "it": None, "runs": []}

    def on_switch(event: str, args: Any) -> None:
        if event not in ("switch", "throw"):
            return
        origin = args[0]
        now, cpu = time.perf_counter(), time.thread_time()
        if now - st["t"] >= _HOLD_S and "Hub" not in type(origin).__name__ and ident() == main:
            _count(holds, _where(origin, 3), (now - st["t"]) * 1e3, (cpu - st["c"]) * 1e3)
        if st["it"] is not None and "Hub" not in type(origin).__name__ and now - st["t"] > 0.001:
            st["runs"].append(
                [round((now - st["t"]) * 1e3, 2), round((cpu - st["c"]) * 1e3, 2), _where(origin)]
            )
        st["t"], st["c"] = now, cpu

    loop = gevent.get_hub().loop
    check, prepare = loop.check(ref=False), loop.prepare(ref=False)

    def on_check() -> None:  # after the poll: the iteration's work begins
        st["it"] = (time.perf_counter(), time.thread_time())
        st["runs"] = []

    def on_prepare() -> None:  # before the next poll: it ends
        if st["it"] is None:
            return
        t0, c0 = st["it"]
        wall = time.perf_counter() - t0
        if wall >= _MIN_S:
            spans.append(
                {
                    "t": round(time.time(), 3),
                    "wall_ms": round(wall * 1e3, 2),
                    "cpu_ms": round((time.thread_time() - c0) * 1e3, 2),
                    "greenlets": sorted(st["runs"], reverse=True)[:3],
                }
            )
        st["it"] = None

    check.start(on_check)
    prepare.start(on_prepare)
    greenlet.settrace(on_switch)
    st["watchers"] = (check, prepare)

    def dump() -> None:
        with open(f"{_PREFIX}.{os.getpid()}", "w") as fh:
            for s in spans:
                fh.write(json.dumps(s) + "\n")

            def rnd(t: dict[str, list[float]]) -> dict[str, list[float]]:
                return {k: [v[0], round(v[1], 2), round(v[2], 2), round(v[3], 2)] for k, v in t.items()}

            fh.write(json.dumps({"holds": rnd(holds), "calls": rnd(calls)}) + "\n")

    atexit.register(dump)


if _PREFIX and "--worker" in sys.argv:
    _real_import = builtins.__import__

    def _import(name: str, *a: Any, **kw: Any) -> Any:
        mod = _real_import(name, *a, **kw)
        if (
            name == "vllm_users.distributed.plugin" and builtins.__import__ is _import
        ):  # the worker's loop exists
            builtins.__import__ = _real_import
            _install()
        return mod

    builtins.__import__ = _import
