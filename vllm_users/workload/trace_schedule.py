"""The open-loop schedule of a trace replay: which request of the trace is sent when, and by which worker.

The schedule's entries are the trace's requests that start something: a request outside any session, and the
first turn of each session. Entry i (its position in `Trace.requests`) is due at `t0 + offset_s / time_scale`
and goes to worker `i mod count`, so the workers together keep the trace's one global schedule. A session's
later turns are not on it: the worker that sent the first turn sends each next one `think_ms` after the turn
before it completed (closed within a session, open across sessions), so a session stays on one worker.

Every process (the master and each worker) reads the trace itself, from its path, once (`load_for`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field

from vllm_users import option_types as T
from vllm_users.errors import TraceError
from vllm_users.option_spec import BOTH, opt
from vllm_users.workload.session_graph import graph_of
from vllm_users.workload.trace import Trace, TraceRequest
from vllm_users.workload.trace_formats import registry as trace_formats

__all__ = [
    "MAX_OFFSET_S",
    "TraceOptions",
    "TracePlan",
    "build_plan",
    "check_graph_context",
    "check_trace",
    "load_for",
    "plan_of",
    "worker_trace_iter",
]

MAX_OFFSET_S = (
    30 * 86400.0
)  # a request due later than this after the first (after --time-scale) is a bad line


@dataclass(frozen=True)
class TraceOptions:
    """Trace replay: --trace FILE sends each request of the file at its own timestamp."""

    trace: str = opt(
        "",
        T.text,
        "Replay a trace: each request at its timestamp on the open-loop schedule "
        "(docs/traces.md); every worker reads the file from this path",
        *BOTH,
        metavar="FILE",
    )
    trace_format: str = opt(
        "auto",
        T.text,
        "--trace's format (auto: from the file)",
        *BOTH,
        choices=trace_formats.choices(),
    )
    time_scale: float = opt(
        1.0, T.pos_float, "--trace: replay speed (2 = twice as fast: offsets halved)", *BOTH, metavar="X"
    )
    trace_start: float = opt(
        0.0, T.nonneg_float, "--trace: skip the trace's first S seconds", *BOTH, metavar="S"
    )
    trace_duration: float | None = opt(
        None, T.pos_float, "--trace: replay D seconds of it (from --trace-start)", *BOTH, metavar="D"
    )
    trace_block_size: int = opt(512, T.pos_int, "--trace mooncake: prompt tokens per hash id", *BOTH)
    trace_timestamp_unit: str = opt(
        "auto",
        T.text,
        f"--trace: unit of a {trace_formats.own_unit_names()} `timestamp` (auto: the format's own)",
        *BOTH,
        choices=("auto", "s", "ms", "us"),
    )


@dataclass(frozen=True)
class TracePlan:
    """A trace as a schedule: its entries (global index, offset s) in time order, and each session's turns
    keyed by the index of its first turn."""

    trace: Trace
    entries: list[tuple[int, float]] = field(default_factory=list)
    sessions: dict[int, list[TraceRequest]] = field(default_factory=dict)

    def requests_of(self, index: int) -> list[TraceRequest]:
        """What entry `index` sends: its session's turns in order, or the one request."""
        return self.sessions.get(index) or [self.trace.requests[index]]

    def session_calls(self) -> dict[int, int]:
        """Each session's entry index -> the LLM calls it makes: its turns, or its graph's calls (less the
        nodes the window cut from their parents, which are never sent)."""
        return {
            i: graph_of(turns, self.trace.path).calls if turns[0].node is not None else len(turns)
            for i, turns in self.sessions.items()
        }


def load_for(o: TraceOptions, num_prompts: int | None) -> Trace:
    """Read `o.trace` with the run's window, cap (`num_prompts`) and block size (a UsageError subclass on a bad file)."""
    return _load(
        o.trace,
        o.trace_format,
        float(o.trace_start or 0.0),
        o.trace_duration,
        num_prompts or None,
        int(o.trace_block_size),
        o.trace_timestamp_unit,
    )


@functools.cache  # once per process: every user of a worker replays the same trace
def _load(
    path: str,
    fmt: str,
    start_s: float,
    duration_s: float | None,
    limit: int | None,
    block_size: int,
    unit: str,
) -> Trace:
    from vllm_users.workload.trace_formats import load_trace

    return load_trace(
        path,
        fmt,
        start_s=start_s,
        duration_s=duration_s,
        limit=limit,
        block_size=block_size,
        timestamp_unit=unit,
    )


def plan_of(o: TraceOptions, num_prompts: int | None) -> TracePlan:
    """The run's trace as a schedule, built once per process (per trace read)."""
    trace = load_for(o, num_prompts)
    plan = _plans.get(id(trace))
    if plan is None or plan.trace is not trace:
        plan = _plans[id(trace)] = build_plan(trace)
    return plan


_plans: dict[int, TracePlan] = {}  # id of a cached Trace (a Trace holds a list: not hashable) -> its plan


def build_plan(trace: Trace) -> TracePlan:
    """Entries and sessions of `trace`: a session's first turn is its lowest turn (ties: the earlier line)."""
    by_session: dict[str, list[int]] = {}
    for i, r in enumerate(trace.requests):
        if r.session_id is not None:
            by_session.setdefault(r.session_id, []).append(i)
    sessions: dict[int, list[TraceRequest]] = {}
    later: set[int] = set()
    for idxs in by_session.values():
        # turn order: the trace's turn numbers where given, else the order of the lines' timestamps
        idxs.sort(key=lambda i: (trace.requests[i].turn if trace.requests[i].turn is not None else i, i))
        first = min(idxs)  # the session starts at its earliest request: that is the schedule's entry
        sessions[first] = [trace.requests[i] for i in idxs]
        later.update(i for i in idxs if i != first)
    entries = [(i, r.offset_s) for i, r in enumerate(trace.requests) if i not in later]
    return TracePlan(trace, entries, sessions)


def check_trace(o: TraceOptions, endpoint: str, num_prompts: int | None) -> str:
    """Read and check the run's trace before anything is sent (TraceError, exit 2); one line saying what it
    replays."""
    trace = load_for(o, num_prompts)
    if not trace.requests:
        window = f" in the window --trace-start {o.trace_start:g}" + (
            f" --trace-duration {o.trace_duration:g}" if o.trace_duration else ""
        )
        raise TraceError(f"--trace {o.trace}: no requests{window}")
    _check_endpoints(trace, endpoint)
    _check_offsets(trace, o.time_scale)
    plan = plan_of(o, num_prompts)
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(trace.skipped.items()))
    scale = (
        f" at --time-scale {o.time_scale:g} ({trace.duration_s / o.time_scale:.1f} s)"
        if o.time_scale != 1
        else ""
    )
    return (
        f"trace {o.trace} ({trace.format}): {trace.calls} requests, {len(plan.sessions)} sessions, over "
        f"{trace.duration_s:.1f} s{scale}" + (f"; skipped: {skipped}" if skipped else "")
    )


def _check_offsets(trace: Trace, time_scale: float) -> None:
    """No request (nor a session's think time) due beyond MAX_OFFSET_S: a timestamp of 1e308 would make the run
    wait for ever. The readers refused negative and non-finite numbers already; this names the first bad line."""
    limit = MAX_OFFSET_S * time_scale  # in the trace's own seconds
    for r in trace.requests:
        if r.offset_s > limit:
            raise TraceError(
                f"{trace.path}:{r.line}: its timestamp puts this request {r.offset_s / time_scale:.4g} s "
                f"after the first, beyond the bound of {MAX_OFFSET_S / 86400:g} days (a wrong unit?)"
            )
        if r.think_ms is not None and r.think_ms / 1000 > limit:
            raise TraceError(
                f"{trace.path}:{r.line}: field 'think_ms': {r.think_ms:.4g} ms is beyond the bound of "
                f"{MAX_OFFSET_S / 86400:g} days"
            )


def _check_endpoints(trace: Trace, default: str) -> None:
    """Images only on chat requests, and a session's turns on a generating API: a line without `endpoint` is
    sent to --endpoint (the jsonl reader checked each line's own fields already)."""
    for r in trace.requests:
        ep = r.endpoint or default
        if r.images and ep != "chat":
            raise TraceError(
                f"{trace.path}:{r.line}: field 'images': only a chat request carries images (this "
                f"line goes to --endpoint {ep})"
            )
        if r.session_id is not None and ep in ("embeddings", "rerank", "score"):
            field_ = "endpoint" if r.endpoint else "session_id"
            raise TraceError(
                f"{trace.path}:{r.line}: field '{field_}': a session's turns are chat, completions or "
                f"responses requests, not {ep}"
            )


def worker_trace_iter(
    plan: TracePlan, time_scale: float, worker_index: int, worker_count: int
) -> Iterator[tuple[int, float]]:
    """This worker's entries (global index, offset s from t0 after --time-scale): every count-th by index."""
    if worker_count < 1 or not 0 <= worker_index < worker_count:
        raise ValueError(f"bad worker split {worker_index}/{worker_count}")
    if not time_scale > 0:
        raise ValueError(f"time scale must be > 0, got {time_scale}")
    for i, off in plan.entries:
        if i % worker_count == worker_index:
            yield i, off / time_scale


def check_graph_context(plan: TracePlan, max_model_len: int | None) -> None:
    """Every call of a session graph fits the server's context: the prompt the trace's lengths give it (its
    history and new text, before the chat template's tokens) and its answer within `max_model_len`; a TraceError
    (exit 2) naming the trace, the session and the first node that does not. None: the server lists no length."""
    if not max_model_len:
        return
    for turns in plan.sessions.values():
        if turns[0].node is None:
            continue
        for n in graph_of(turns, plan.trace.path).nodes:
            prompt, out = n.context_len + (n.new_len or 0), n.request.output_len or 0
            if n.is_call and prompt + out > max_model_len:
                raise TraceError(
                    f"{plan.trace.path}:{n.request.line}: session {n.request.session_id!r}, node {n.key!r}: its "
                    f"prompt of {prompt} tokens and answer of {out} pass the server's max_model_len "
                    f"{max_model_len}"
                )
