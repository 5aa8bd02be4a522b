"""`jsonl`: our generic format, one JSON object a line (docs/traces.md); what `trace export` writes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from vllm_users.client.responses import APIS
from vllm_users.errors import TraceError
from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_formats._fields import (
    bad,
    int_field,
    json_lines,
    missing,
    number_field,
    text_field,
)
from vllm_users.workload.trace_formats.registry import Rows, Sniff, TraceFormat

__all__ = ["FORMAT", "read_jsonl"]


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
    images = int_field(d, "images", path, n, least=0, required=False)
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
    for n, d in json_lines(path):
        if "timestamp" in d:
            if "timestamp_ms" in d:
                raise TraceError(
                    f"{path}:{n}: field 'timestamp_ms': give 'timestamp' or 'timestamp_ms', not both"
                )
            t = number_field(d, "timestamp", path, n) * unit_s
        elif "timestamp_ms" in d:
            t = number_field(d, "timestamp_ms", path, n) * 0.001
        else:
            raise missing(path, n, "timestamp")
        prompt = text_field(d, "prompt", path, n)
        messages = _messages(d, path, n)
        inp = int_field(d, "input_len", path, n, least=1, required=False)
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
        turn = int_field(d, "turn", path, n, least=0, required=False)
        think = number_field(d, "think_ms", path, n) if d.get("think_ms") is not None else None
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
                output_len=int_field(d, "output_len", path, n, least=1, required=False),
                prompt=prompt,
                messages=messages,
                session_id=None if sid is None else str(sid),
                turn=turn,
                think_ms=think,
                model=text_field(d, "model", path, n),
                tenant=text_field(d, "tenant", path, n),
                priority=prio,
                scenario=text_field(d, "scenario", path, n),
                endpoint=ep,
                images=images,
                line=n,
            )
        )
    return out, Counter()


def _detect(s: Sniff) -> bool:
    return s.json_keys is not None


FORMAT = TraceFormat(
    name="jsonl",
    read=read_jsonl,
    rank=40,
    summary="our generic format: a prompt, messages or a length a line; sessions, endpoints, images",
    timestamp="seconds in `timestamp` (in `timestamp_ms`: milliseconds, always)",
    unit_s=1.0,
    detected_by="other JSON lines",
    detect=_detect,
    fallback=True,
)
