"""Reading a trace file into a `Trace` (`--trace FILE --trace-format F`), and writing one as our `jsonl` format.

`load_trace` detects or takes the format, reads every row through its reader (`trace_readers.py`), checks
everything (a bad row is one `TraceError` naming the file, the line and the field) before it returns, so the
caller can load the trace before any request is sent. Offsets are seconds from the first request of the
window (`start_s`, `duration_s`, both from the trace's first request), in send order; `limit` keeps the first
`limit` requests. docs/traces.md describes each format.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from vllm_users import run_dir
from vllm_users.errors import TraceError, UsageError
from vllm_users.workload import trace_readers as R
from vllm_users.workload.trace import Trace, TraceRequest

__all__ = [
    "TIMESTAMP_UNITS",
    "TRACE_FORMATS",
    "detect_format",
    "load_trace",
    "to_jsonl_line",
    "trace_block_reuse",
]

TRACE_FORMATS = ("auto", "mooncake", "azure", "burstgpt", "jsonl", "records")
TIMESTAMP_UNITS = {"auto": None, "s": 1.0, "ms": 1e-3, "us": 1e-6}  # None: the format's own unit
_OWN_UNIT = {"mooncake": 1e-3, "burstgpt": 1.0, "jsonl": 1.0}  # azure's are times of day, records' epoch s


def detect_format(path: str) -> str:
    """The format of the trace at `path` from its content: a run directory or records file, mooncake (JSON
    lines with `hash_ids`/`input_length`), our jsonl (other JSON lines), azure or burstgpt (a CSV header)."""
    if os.path.isdir(path):
        if not run_dir.has_records(path):
            raise TraceError(
                f"{path}: a directory without {run_dir.PARQUET} or {run_dir.RECORDS} (not a run directory)"
            )
        return "records"
    if os.path.basename(path) == run_dir.RECORDS:
        return "records"
    first = _first_line(path)
    if first.startswith("{"):
        try:
            keys = json.loads(first).keys()
        except (ValueError, AttributeError):
            raise TraceError(f"{path}:1: not valid JSON (cannot tell the trace format)") from None
        if "hash_ids" in keys or "input_length" in keys:
            return "mooncake"
        return "records" if {"t_start", "worker", "endpoint"} <= keys else "jsonl"
    header = {h.strip() for h in next(csv.reader(io.StringIO(first)), [])}
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= header:
        return "azure"
    if {"Timestamp", "Request tokens", "Response tokens"} <= header:
        return "burstgpt"
    raise TraceError(f"{path}: cannot tell the trace format from its first line (give --trace-format)")


def _first_line(path: str) -> str:
    """The first non-blank line (without a byte-order mark), for detect_format."""
    try:
        with open(path, encoding="utf-8-sig") as fh:
            for line in fh:
                if line.strip():
                    return line.strip()
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a UTF-8 text file") from None
    raise TraceError(f"{path}: the trace is empty (no requests)")


def load_trace(
    path: str,
    fmt: str = "auto",
    *,
    start_s: float = 0.0,
    duration_s: float | None = None,
    limit: int | None = None,
    block_size: int = 512,
    timestamp_unit: str = "auto",
) -> Trace:
    """Read, check and window the trace at `path`; a TraceError (exit 2) names the first bad row."""
    if fmt not in TRACE_FORMATS:
        raise UsageError(f"unknown trace format {fmt!r} (one of {', '.join(TRACE_FORMATS)})")
    if timestamp_unit not in TIMESTAMP_UNITS:
        raise UsageError(f"unknown timestamp unit {timestamp_unit!r} (one of {', '.join(TIMESTAMP_UNITS)})")
    if not (start_s >= 0 and math.isfinite(start_s)) or (duration_s is not None and not duration_s > 0):
        raise UsageError(
            f"the trace window needs a start >= 0 and a duration > 0, got {start_s} and {duration_s}"
        )
    if limit is not None and limit < 1 or block_size < 1:
        raise UsageError(f"the trace needs a limit >= 1 and a block size >= 1, got {limit} and {block_size}")
    if not os.path.exists(path):
        raise TraceError(f"{path}: no such trace file or run directory")
    fmt = detect_format(path) if fmt == "auto" else fmt
    unit = TIMESTAMP_UNITS[timestamp_unit]
    if unit is not None and fmt not in _OWN_UNIT:
        raise UsageError(
            f"a {fmt} trace's timestamps have a unit of their own: leave the timestamp unit at auto"
        )
    unit_s = _OWN_UNIT.get(fmt, 1.0) if unit is None else unit
    readers: dict[str, Callable[[], R.Rows]] = {
        "mooncake": lambda: R.read_mooncake(path, unit_s),
        "jsonl": lambda: R.read_jsonl(path, unit_s),
        "azure": lambda: R.read_azure(path),
        "burstgpt": lambda: R.read_burstgpt(path, unit_s),
        "records": lambda: R.read_records_trace(path),
    }
    try:
        requests, skipped = readers[fmt]()
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise TraceError(f"{path}: not a valid CSV file: {e}") from None
    if not requests:
        said = f" (skipped: {_said(dict(skipped))})" if skipped else ""
        raise TraceError(f"{path}: the trace has no requests{said}")
    requests.sort(key=attrgetter("offset_s"))  # stable: equal times keep the file's order
    _check_sessions(requests, path)
    kept = _window(requests, start_s, duration_s, limit)
    if not kept:
        span = requests[-1].offset_s - requests[0].offset_s
        end = "" if duration_s is None else f" to {start_s + duration_s:g} s"
        raise TraceError(
            f"{path}: no requests in the window from {start_s:g} s{end} (the trace spans {span:g} s)"
        )
    t0 = kept[0].offset_s
    for r in kept:  # the requests are this function's own, not yet handed out: in place spares a 1M-row copy
        r.offset_s -= t0
    return Trace(path=path, format=fmt, requests=kept, skipped=dict(skipped), block_size=block_size)


def _said(skipped: dict[str, int]) -> str:
    return ", ".join(f"{n} {why}" for why, n in sorted(skipped.items()))


def _check_sessions(requests: list[TraceRequest], path: str) -> None:
    """A session's turns, in time order, are strictly increasing; a session without turns gets 0, 1, ... in
    time order. All of a session's requests give a turn or none does."""
    sessions: dict[str, list[TraceRequest]] = {}
    for r in requests:
        if r.session_id is not None:
            sessions.setdefault(r.session_id, []).append(r)
    for sid, turns in sessions.items():
        given = [r for r in turns if r.turn is not None]
        if not given:
            for k, r in enumerate(turns):
                r.turn = k
            continue
        if len(given) != len(turns):
            r = next(r for r in turns if r.turn is None)
            raise TraceError(
                f"{path}:{r.line}: field 'turn': missing (other requests of session {sid!r} have one)"
            )
        for a, b in zip(turns, turns[1:], strict=False):
            if b.turn <= a.turn:  # type: ignore[operator]  # every turn is set (checked above)
                raise TraceError(
                    f"{path}:{b.line}: field 'turn': turn {b.turn} of session {sid!r} is not after "
                    f"turn {a.turn} (line {a.line}) in time"
                )


def _window(
    requests: list[TraceRequest], start_s: float, duration_s: float | None, limit: int | None
) -> list[TraceRequest]:
    """The requests from `start_s` for `duration_s` after the trace's first one, at most `limit`; a session
    is in the window when its first turn is (its later turns come with it: they follow that turn)."""
    lo = requests[0].offset_s + start_s
    hi = math.inf if duration_s is None else lo + duration_s
    if start_s == 0 and duration_s is None:
        kept = requests
    else:
        first: dict[str, float] = {}
        for r in requests:
            if r.session_id is not None:
                first.setdefault(r.session_id, r.offset_s)
        kept = [
            r for r in requests if lo <= (r.offset_s if r.session_id is None else first[r.session_id]) < hi
        ]
    return kept if limit is None else kept[:limit]


def trace_block_reuse(trace: Trace) -> float | None:
    """The prefix-cache hit rate an infinite cache would reach on a mooncake trace: prompt tokens in blocks whose
    hash id (and every earlier block's of the prompt) appeared in an earlier request, over all prompt tokens.
    A block holds `trace.block_size` tokens (a prompt's last one the rest). None: the trace has no hash ids."""
    seen: set[int] = set()
    hit = total = 0
    bs = trace.block_size
    any_ids = False
    for r in trace.requests:
        n = r.input_len or 0
        total += n
        if not r.hash_ids:
            continue
        any_ids = True
        for i, h in enumerate(r.hash_ids):
            if h not in seen:
                break  # a prefix cache hits a block only after every block before it
            hit += max(0, min(bs, n - i * bs))
        seen.update(r.hash_ids)
    return hit / total if any_ids and total else None


_KEYS = (
    "input_len",
    "output_len",
    "prompt",
    "messages",
    "session_id",
    "turn",
    "think_ms",
    "scenario",
    "tenant",
    "model",
    "priority",
    "endpoint",
    "images",
)
_get = attrgetter(*_KEYS)


def to_jsonl_line(r: TraceRequest) -> str:
    """One request as a line of our jsonl format (no newline): `timestamp` in seconds to the microsecond, then
    the fields it has."""
    d: dict[str, Any] = {"timestamp": round(r.offset_s, 6)}
    d.update((k, v) for k, v in zip(_KEYS, _get(r), strict=True) if v is not None)
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"))
