"""Event-loop tracer for `bench_loop_lag.py --trace`: imported by every Python process whose PYTHONPATH holds this
folder, active only in Locust workers and only when BENCH_LOOP_TRACE is set (a path prefix).

Per loop iteration (libev: from the check watcher, after the poll, to the prepare watcher, before the next
poll) it times the work with the wall clock and with this thread's CPU clock. An iteration much longer in
wall time than in CPU time was the OS not running the process (a busy machine); one long in both is code
that held the loop. Each iteration over BENCH_LOOP_TRACE_MS (default 5) is written at exit with the greenlets
that ran longest in it, named by where they yielded: BENCH_LOOP_TRACE.<pid>, one JSON object a line.
It costs a few µs per iteration and per greenlet switch: use it to find what blocks, not for the figures.
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


def _where(g: Any) -> str:
    f = getattr(g, "gr_frame", None)
    if f is None:
        return type(g).__name__
    st = traceback.extract_stack(f, limit=6)
    return " < ".join(f"{os.path.basename(x.filename)}:{x.lineno}:{x.name}" for x in reversed(st))


def _install() -> None:
    import gevent
    import greenlet

    spans: list[dict[str, Any]] = []
    st: dict[str, Any] = {"t": time.perf_counter(), "c": time.thread_time(), "it": None, "runs": []}

    def on_switch(event: str, args: Any) -> None:
        if event not in ("switch", "throw"):
            return
        origin = args[0]
        now, cpu = time.perf_counter(), time.thread_time()
        if st["it"] is not None and "Hub" not in type(origin).__name__ and now - st["t"] > 0.001:
            st["runs"].append([round((now - st["t"]) * 1e3, 2), round((cpu - st["c"]) * 1e3, 2), _where(origin)])
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
            spans.append({"t": round(time.time(), 3), "wall_ms": round(wall * 1e3, 2),
                          "cpu_ms": round((time.thread_time() - c0) * 1e3, 2),
                          "greenlets": sorted(st["runs"], reverse=True)[:3]})  # fmt: skip
        st["it"] = None

    check.start(on_check)
    prepare.start(on_prepare)
    greenlet.settrace(on_switch)
    st["watchers"] = (check, prepare)

    def dump() -> None:
        with open(f"{_PREFIX}.{os.getpid()}", "w") as fh:
            for s in spans:
                fh.write(json.dumps(s) + "\n")

    atexit.register(dump)


if _PREFIX and "--worker" in sys.argv:
    _real_import = builtins.__import__

    def _import(name: str, *a: Any, **kw: Any) -> Any:
        mod = _real_import(name, *a, **kw)
        if name == "vllm_users.distributed.plugin" and builtins.__import__ is _import:  # the worker's loop exists
            builtins.__import__ = _real_import
            _install()
        return mod

    builtins.__import__ = _import
