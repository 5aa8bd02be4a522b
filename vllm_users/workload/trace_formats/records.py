"""`records`: one of our runs (its directory or records file) replayed as it was sent."""

from __future__ import annotations

import os
from collections import Counter

from vllm_users import run_dir
from vllm_users.errors import TraceError
from vllm_users.measure.record import RequestRecord
from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_formats.registry import Rows, Sniff, TraceFormat

__all__ = ["FORMAT", "read_records_trace"]


def read_records_trace(path: str) -> Rows:
    """A run directory (or its records file): one request per sent record (dropped arrivals were never sent),
    at its intended start (open loop) else its start; sessions of 2+ requests keep their turns, with
    think_ms = the gap from the previous turn's end to this turn's start, and a later turn's length its new
    message's (`_new_input`), and its answer the length it produced (`_produced`); each keeps its endpoint and
    image count."""
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
                output_len=_produced(r),
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


def _produced(r: RequestRecord) -> int | None:
    """The answer length a replay asks of a record: what it produced when it completed (a json answer stops at
    its schema's end, far under the max_tokens it was allowed: asking that again doubled a replay's tokens),
    else what it asked for (a failed or cut-off answer's partial count is no length)."""
    if r.error is None and r.output_tokens:
        return r.output_tokens
    return r.output_len if r.output_len is not None else (r.output_tokens or None)


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


def _detect(s: Sniff) -> bool:
    return s.is_run() or s.has_keys("t_start", "worker", "endpoint")


FORMAT = TraceFormat(
    name="records",
    read=lambda path, _unit_s: read_records_trace(path),
    rank=50,
    summary="a run of ours: its directory or `records.jsonl`, as it was sent (sessions, endpoints, images)",
    timestamp="epoch seconds",
    detected_by="a run directory, `records.jsonl`, or JSON lines with `t_start`, `worker`, `endpoint`",
    detect=_detect,
)
