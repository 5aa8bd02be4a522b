"""Exceptions raised by user code (a `-f` locustfile's or a `--scenario pkg.mod:Class` user's task): each named by
its type, message and the line that raised it, counted on the workers, merged on the master, and said in the run's
last line (Locust alone keeps only the message and traceback, in locust_exceptions.csv). Free of Locust."""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

__all__ = ["MAX_KINDS", "add", "describe", "merge", "summary_line"]

MAX_KINDS = (
    5  # distinct exceptions kept per worker (a task that raises a new message each time stays bounded)
)
_OURS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
)  # vllm_users/: not the user's bug


def describe(exc: BaseException, tb: TracebackType | None) -> dict[str, Any]:
    """One exception as {type, message, where, user}: `where` is FILE:LINE of the innermost frame outside
    vllm_users and site-packages (the user's own code: `user`), else the innermost frame (not the user's)."""
    frames = traceback.extract_tb(tb) if tb is not None else []
    mine = [f for f in frames if not f.filename.startswith(_OURS) and "site-packages" not in f.filename]
    chosen = mine or frames
    where = f"{chosen[-1].filename}:{chosen[-1].lineno}" if chosen else "?"
    message = " ".join(str(exc).split())[:300]
    return {"type": type(exc).__name__, "message": message, "where": where, "user": bool(mine), "count": 1}


def add(kinds: list[dict[str, Any]], exc: BaseException, tb: TracebackType | None) -> None:
    """Count one exception into `kinds` (at most MAX_KINDS distinct ones; more of a known one only count)."""
    d = describe(exc, tb)
    for k in kinds:
        if (k["type"], k["message"], k["where"]) == (d["type"], d["message"], d["where"]):
            k["count"] += 1
            return
    if len(kinds) < MAX_KINDS:
        kinds.append(d)


def merge(per_worker: Iterable[Iterable[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The workers' lists as one, counts summed, the most frequent first."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for kinds in per_worker:
        for k in kinds:
            key = (str(k["type"]), str(k["message"]), str(k["where"]))
            out.setdefault(key, {**k, "count": 0})["count"] += int(k["count"])
    return sorted(out.values(), key=lambda k: -k["count"])


def summary_line(kinds: list[dict[str, Any]]) -> str | None:
    """The run's one line about them (None: user code raised nothing)."""
    if not kinds:
        return None
    top = kinds[0]
    n = sum(int(k["count"]) for k in kinds)
    more = f"; {len(kinds) - 1} other kind(s), {n - top['count']} more" if len(kinds) > 1 else ""
    who = "user code" if top.get("user", True) else "a task (in vllm-locust's own code)"
    return (
        f"{who} raised {top['type']}: {top['message']} ({top['where']}), {top['count']} time(s){more}; "
        "tracebacks in the workers' logs"
    )
