"""One reader per trace format: a file's rows -> `TraceRequest`s at absolute offsets (seconds), validated.

`trace_formats.load_trace` picks the reader, then sorts, checks sessions, cuts the window and rebases the
offsets on the first request. Each reader raises one `TraceError` naming the file, the line (a CSV's line
number, header = 1) and the field of the first bad row, and counts the rows a format defines as not requests
(BurstGPT's failed rows, zero-token rows, a run's dropped arrivals) in `skipped`.
Per row only the json/csv decode and a few type checks run: a 1M-line trace reads in seconds.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from vllm_users import run_dir
from vllm_users.client.responses import APIS
from vllm_users.errors import TraceError
from vllm_users.measure.record import RequestRecord
from vllm_users.workload.trace import TraceRequest

__all__ = ["read_azure", "read_burstgpt", "read_jsonl", "read_mooncake", "read_records_trace"]

Rows = tuple[
    list[TraceRequest], Counter[str]
]  # the requests (absolute offsets, file order) and skipped counts
_decode = json.JSONDecoder().decode
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # the C scanner without decode()'s two regex passes: ~2x on short lines
_INTS = {int}


# ------------------------------------------------------------------------------------------ field checks
def _shown(value: Any) -> str:
    """A value as the error message shows it: JSON, cut short."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def bad(path: str, line: int, name: str, expected: str, value: Any) -> TraceError:
    """The one-line error of a bad field: `FILE:LINE: field 'NAME': expected ..., got VALUE`."""
    return TraceError(f"{path}:{line}: field '{name}': expected {expected}, got {_shown(value)}")


def _missing(path: str, line: int, name: str) -> TraceError:
    return TraceError(f"{path}:{line}: field '{name}': missing")


def _int(
    d: dict[str, Any], name: str, path: str, line: int, *, least: int, required: bool = True
) -> int | None:
    """d[name] as an int >= least (a JSON integer, not a bool or float); None when absent and not required."""
    v = d.get(name)
    if type(v) is int and v >= least:
        return v
    if v is None and name not in d and not required:
        return None
    if v is None and name not in d:
        raise _missing(path, line, name)
    raise bad(path, line, name, "a positive integer" if least == 1 else f"an integer >= {least}", v)


def _number(d: dict[str, Any], name: str, path: str, line: int) -> float:
    """d[name] as a finite number >= 0."""
    v = d[name]
    if type(v) in (int, float) and v >= 0 and math.isfinite(v):
        return float(v)
    raise bad(path, line, name, "a number >= 0", v)


def _text(d: dict[str, Any], name: str, path: str, line: int) -> str | None:
    """d[name] as a non-empty string; None when absent (or null)."""
    v = d.get(name)
    if v is None or (type(v) is str and v):
        return v
    raise bad(path, line, name, "a non-empty string", v)


def _csv_int(text: str, name: str, path: str, line: int) -> int:
    """A CSV cell as an int >= 0."""
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise bad(path, line, name, "an integer >= 0", text)
    return v


# ------------------------------------------------------------------------------------------ JSON lines
def _json_lines(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for each non-blank line; a line that is not a JSON object is an error."""
    with open(path, encoding="utf-8-sig") as fh:  # -sig: a byte-order mark (Windows editors) is not data
        for n, line in enumerate(fh, 1):
            if not line or line.isspace():
                continue
            try:
                d, end = _scan(line, 0)
                if end != len(line) and not line[end:].isspace():
                    d = _decode(line)  # raises "Extra data" with its column
            except StopIteration:  # nothing JSON at column 1 (a space, a bare word): decode() says what
                try:
                    d = _decode(line)
                except ValueError as e:
                    raise TraceError(f"{path}:{n}: not valid JSON: {getattr(e, 'msg', e)}") from None
            except ValueError as e:
                raise TraceError(f"{path}:{n}: not valid JSON: {getattr(e, 'msg', e)}") from None
            if type(d) is not dict:
                raise TraceError(f"{path}:{n}: expected a JSON object, got {_shown(d)}")
            yield n, d


def read_mooncake(path: str, unit_s: float) -> Rows:
    """Mooncake: `timestamp` (ms unless told), `input_length`, `output_length`, `hash_ids` (ints)."""
    out: list[TraceRequest] = []
    skipped: Counter[str] = Counter()
    for n, d in _json_lines(path):
        if "timestamp" not in d:
            raise _missing(path, n, "timestamp")
        t = _number(d, "timestamp", path, n) * unit_s
        inp = _int(d, "input_length", path, n, least=1)
        outl = _int(d, "output_length", path, n, least=0)
        ids = d.get("hash_ids")
        if ids is None:
            raise _missing(path, n, "hash_ids")
        if type(ids) is not list or (ids and set(map(type, ids)) != _INTS):  # bools are not ids either
            raise bad(path, n, "hash_ids", "a list of integers", ids)
        if not outl:
            skipped["zero_output"] += 1
            continue
        out.append(TraceRequest(t, input_len=inp, output_len=outl, hash_ids=tuple(ids), line=n))
    return out, skipped


def _messages(d: dict[str, Any], path: str, n: int) -> list[dict[str, Any]] | None:
    v = d.get("messages")
    if v is None:
        return None
    if type(v) is list and v and all(type(m) is dict and type(m.get("role")) is str for m in v):
        return v
    raise bad(path, n, "messages", 'a non-empty list of {"role": ..., "content": ...} objects', v)


def _endpoint_images(d: dict[str, Any], path: str, n: int) -> tuple[str | None, int | None]:
    """A line's `endpoint` (one of the APIs) and `images` (an int >= 0, only on a chat line)."""
    ep = d.get("endpoint")
    if ep is not None and ep not in APIS:
        raise bad(path, n, "endpoint", "one of " + "|".join(APIS), ep)
    images = _int(d, "images", path, n, least=0, required=False)
    if images and ep is not None and ep != "chat":
        raise TraceError(
            f"{path}:{n}: field 'images': only a chat request carries images (this line's endpoint is {ep})"
        )
    return ep, images


def read_jsonl(path: str, unit_s: float) -> Rows:
    """Our generic format (docs/traces.md): `timestamp` (s, or `unit_s`) or `timestamp_ms`; `prompt`,
    `messages` or `input_len`; optional `output_len`, `session_id`, `turn`, `think_ms`, `model`, `tenant`,
    `priority`, `scenario`, `endpoint`, `images`."""
    out: list[TraceRequest] = []
    for n, d in _json_lines(path):
        if "timestamp" in d:
            if "timestamp_ms" in d:
                raise TraceError(
                    f"{path}:{n}: field 'timestamp_ms': give 'timestamp' or 'timestamp_ms', not both"
                )
            t = _number(d, "timestamp", path, n) * unit_s
        elif "timestamp_ms" in d:
            t = _number(d, "timestamp_ms", path, n) * 0.001
        else:
            raise _missing(path, n, "timestamp")
        prompt = _text(d, "prompt", path, n)
        messages = _messages(d, path, n)
        inp = _int(d, "input_len", path, n, least=1, required=False)
        given = [
            k for k, v in (("prompt", prompt), ("messages", messages), ("input_len", inp)) if v is not None
        ]
        if len(given) != 1:
            what = (
                "missing (give 'prompt', 'messages' or 'input_len')"
                if not given
                else f"give one of 'prompt', 'messages', 'input_len', not {' and '.join(given)}"
            )
            raise TraceError(f"{path}:{n}: field '{given[-1] if given else 'input_len'}': {what}")
        sid = d.get("session_id")
        if sid is not None and (type(sid) not in (str, int) or sid == ""):
            raise bad(path, n, "session_id", "a string or an integer", sid)
        turn = _int(d, "turn", path, n, least=0, required=False)
        think = _number(d, "think_ms", path, n) if d.get("think_ms") is not None else None
        if sid is None and (turn is not None or think is not None):
            name = "turn" if turn is not None else "think_ms"
            raise TraceError(
                f"{path}:{n}: field '{name}': only a request of a session (with 'session_id') has one"
            )
        prio = d.get("priority")
        if prio is not None and type(prio) is not int:
            raise bad(path, n, "priority", "an integer", prio)
        ep, images = _endpoint_images(d, path, n)
        out.append(
            TraceRequest(
                t,
                input_len=inp,
                output_len=_int(d, "output_len", path, n, least=1, required=False),
                prompt=prompt,
                messages=messages,
                session_id=None if sid is None else str(sid),
                turn=turn,
                think_ms=think,
                model=_text(d, "model", path, n),
                tenant=_text(d, "tenant", path, n),
                priority=prio,
                scenario=_text(d, "scenario", path, n),
                endpoint=ep,
                images=images,
                line=n,
            )
        )
    return out, Counter()


# ------------------------------------------------------------------------------------------ CSV
def _csv_rows(path: str, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """(line number, the cells of `columns` in that order) for each non-empty row after the header."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        for c in columns:
            if c not in header:
                raise TraceError(
                    f"{path}:1: missing column '{c}' (the header has {', '.join(header) or 'nothing'})"
                )
        idx = [header.index(c) for c in columns]
        width = max(idx) + 1
        for row in reader:
            if not row:
                continue
            if len(row) < width:
                raise TraceError(f"{path}:{reader.line_num}: expected {len(header)} columns, got {len(row)}")
            yield reader.line_num, [row[i] for i in idx]


class _AzureClock:
    """Azure's `TIMESTAMP` (`2023-11-16 18:15:46.6805900`, maybe `+00:00`) as epoch seconds, every digit of
    the fraction kept (datetime stops at microseconds); naive times are UTC. One row's second is parsed
    once: rows come in time order, so consecutive rows mostly share it."""

    def __init__(self) -> None:
        self.base = ""
        self.seconds = 0.0

    def __call__(self, text: str, path: str, line: int) -> float:
        s = text.strip()
        tz = ""
        if s.endswith("Z"):
            s, tz = s[:-1], "+00:00"
        elif len(s) > 6 and s[-6] in "+-" and s[-3] == ":":
            s, tz = s[:-6], s[-6:]
        base, _, frac = s.partition(".")
        if frac and not frac.isdigit():
            raise bad(path, line, "TIMESTAMP", "a time like 2023-11-16 18:15:46.6805900", text)
        key = base + tz
        if key != self.base:
            try:
                dt = datetime.fromisoformat(key)
            except ValueError:
                raise bad(path, line, "TIMESTAMP", "a time like 2023-11-16 18:15:46.6805900", text) from None
            self.base, self.seconds = key, (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()
        return self.seconds + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _lengths_or_skip(inp: int, outl: int, skipped: Counter[str]) -> bool:
    if inp and outl:
        return True
    skipped["zero_input" if not inp else "zero_output"] += 1
    return False


def read_azure(path: str) -> Rows:
    """Azure LLM inference trace (2023, 2024): `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`."""
    out: list[TraceRequest] = []
    skipped: Counter[str] = Counter()
    clock = _AzureClock()
    for n, (ts, ctx, gen) in _csv_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        t = clock(ts, path, n)
        inp, outl = _csv_int(ctx, "ContextTokens", path, n), _csv_int(gen, "GeneratedTokens", path, n)
        if _lengths_or_skip(inp, outl, skipped):
            out.append(TraceRequest(t, input_len=inp, output_len=outl, line=n))
    return out, skipped


def read_burstgpt(path: str, unit_s: float) -> Rows:
    """BurstGPT: `Timestamp` (s), `Request tokens`, `Response tokens`; 0 response tokens is a failed request."""
    out: list[TraceRequest] = []
    skipped: Counter[str] = Counter()
    for n, (ts, req, resp) in _csv_rows(path, ("Timestamp", "Request tokens", "Response tokens")):
        try:
            t = float(ts)
        except ValueError:
            t = -1.0
        if not (t >= 0 and math.isfinite(t)):
            raise bad(path, n, "Timestamp", "a number >= 0", ts)
        inp, outl = _csv_int(req, "Request tokens", path, n), _csv_int(resp, "Response tokens", path, n)
        if outl == 0:
            skipped["failed"] += 1  # BurstGPT logs a failed request with 0 response tokens
        elif _lengths_or_skip(inp, outl, skipped):
            out.append(TraceRequest(t * unit_s, input_len=inp, output_len=outl, line=n))
    return out, skipped


# ------------------------------------------------------------------------------------------ a run's records
def read_records_trace(path: str) -> Rows:
    """A run directory (or its records file): one request per sent record (dropped arrivals were never sent),
    at its intended start (open loop) else its start; sessions of 2+ requests keep their turns, with
    think_ms = the gap from the previous turn's end to this turn's start, and a later turn's length its new
    message's (`_new_input`); each keeps its endpoint and image count."""
    from vllm_users.measure.records_store import read_request_records  # pyarrow: loaded where it is used

    if not (run_dir.has_records(path) if os.path.isdir(path) else os.path.isfile(path)):
        raise TraceError(
            f"{path}: a directory without {run_dir.PARQUET} or {run_dir.RECORDS} (not a run directory)"
        )
    records, torn = read_request_records(path)
    skipped: Counter[str] = Counter()
    if torn:
        skipped["unreadable"] = torn
    sent = []
    for i, r in enumerate(records):
        if r.error == "dropped":
            skipped["dropped"] += 1
        elif (r.input_len if r.input_len is not None else r.prompt_tokens) is None:
            skipped["no_length"] += 1  # neither the requested nor the served prompt length: nothing to replay
        else:
            sent.append((r.t_intended if r.t_intended is not None else r.t_start, i, r))
    sent.sort(key=lambda x: (x[0], x[1]))
    by_session: dict[tuple[str, int], list[int]] = {}
    for k, (_t, _i, r) in enumerate(sent):
        if r.session is not None:
            by_session.setdefault((r.worker, r.session), []).append(k)
    Link = tuple[str | None, int | None, float | None]  # (session id, turn, think_ms)
    link: dict[int, Link] = {}  # index in `sent` -> its place in a session
    previous: dict[int, RequestRecord] = {}  # index in `sent` of a later turn -> the session's previous turn
    for (worker, session), ks in by_session.items():
        if len(ks) < 2:
            continue  # a session of one request is a plain request
        ks.sort(key=lambda k: sent[k][2].t_start)
        for pos, k in enumerate(ks):
            think = None
            if pos:
                before = previous[k] = sent[ks[pos - 1]][2]
                gap = sent[k][2].t_start - (before.t_start + before.end_us / 1e6)
                think = round(max(0.0, gap) * 1e3, 3)
            link[k] = (f"{worker}/{session}", pos, think)
    out = []
    none: Link = (None, None, None)
    for k, (t, i, r) in enumerate(sent):
        sid, turn, think = link.get(k, none)
        out.append(
            TraceRequest(
                t,
                input_len=_new_input(r, previous.get(k)),
                output_len=r.output_len if r.output_len is not None else (r.output_tokens or None),
                session_id=sid,
                turn=turn,
                think_ms=think,
                model=r.model,
                tenant=r.request_class,
                scenario=r.scenario,
                endpoint=r.endpoint,
                images=_new_images(r, previous.get(k)),
                line=i + 1,
            )
        )
    return out, skipped


def _new_input(r: RequestRecord, before: RequestRecord | None) -> int | None:
    """The prompt length a replay asks of a record: its requested `input_len`; else its served prompt_tokens,
    less, on a later turn of a session (`before`: the previous turn), the history the replay sends anyway (the
    previous turn's prompt and answer), at least 1. Without that, a later turn would count its history twice."""
    if r.input_len is not None:
        return r.input_len
    if before is None or r.prompt_tokens is None or before.prompt_tokens is None:
        return r.prompt_tokens
    return max(1, r.prompt_tokens - before.prompt_tokens - (before.output_tokens or 0))


def _new_images(r: RequestRecord, before: RequestRecord | None) -> int | None:
    """The images a replay attaches for a record: its `images` (every part its body held, history included)
    less, on a later turn, the previous turn's (the history's, sent again by the replay); None: none."""
    if r.images is None or before is None:
        return r.images
    return max(0, r.images - (before.images or 0)) or None
