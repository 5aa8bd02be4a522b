"""`vllm-locust trace export|info`: a run written as a `jsonl` trace (replayed with `run --trace`), and what a
trace file holds (requests, rate, lengths, sessions, skipped rows, a mooncake trace's block reuse).

Both read through vllm_users.workload.trace_formats.load_trace, the reader `run --trace` uses, so what `info`
says of a file is what a replay of it sends.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from orchestration.commands import reported
from orchestration.settings import config as C
from vllm_users.atomic import write_atomic
from vllm_users.workload.trace import Trace
from vllm_users.workload.trace_formats import (
    TIMESTAMP_UNITS,
    TRACE_FORMATS,
    load_trace,
    registry,
    to_jsonl_line,
    trace_block_reuse,
)

__all__ = ["PROG", "main", "trace_info"]

PROG = "vllm-locust trace"


def _parser() -> C.OneLineParser:
    p = C.OneLineParser(
        prog=PROG, description="Export a run as a trace, or describe a trace file (docs/traces.md)"
    )
    sub = p.add_subparsers(dest="action", metavar="{export,info}", required=True)
    ex = sub.add_parser(
        "export", help="Write a run directory as a jsonl trace (replay it with `run --trace FILE`)"
    )
    ex.add_argument("run", metavar="RUN_DIR", help="A run directory (or its records.jsonl)")
    ex.add_argument("-o", "--output", required=True, metavar="FILE", help="The trace to write ('-': stdout)")
    info = sub.add_parser(
        "info", help="Requests, duration, rate, lengths, sessions and block reuse of a trace"
    )
    info.add_argument("file", metavar="FILE", help="A trace file or a run directory")
    info.add_argument(
        "--trace-format", choices=TRACE_FORMATS, default="auto", help="Its format (default: detected)"
    )
    info.add_argument(
        "--trace-start",
        type=float,
        default=0.0,
        metavar="S",
        help="Describe the window from S seconds after the first request",
    )
    info.add_argument("--trace-duration", type=float, default=None, metavar="D", help="... lasting D seconds")
    info.add_argument("--num-prompts", type=int, default=None, metavar="N", help="... of at most N requests")
    info.add_argument(
        "--trace-block-size",
        type=int,
        default=512,
        metavar="TOKENS",
        help="Prompt tokens per mooncake hash id (default 512)",
    )
    info.add_argument(
        "--trace-timestamp-unit",
        choices=tuple(TIMESTAMP_UNITS),
        default="auto",
        help=f"Unit of a {registry.own_unit_names()} `timestamp` (default: the format's own)",
    )
    info.add_argument("--json", action="store_true", help="Print the figures as one JSON object")
    return p


def _lengths(values: list[int]) -> dict[str, float] | None:
    """count, mean, min, p50, p90, p99, max of `values` (percentiles interpolated linearly); None when empty."""
    if not values:
        return None
    v = sorted(values)

    def pct(q: float) -> float:
        x = (len(v) - 1) * q
        lo = math.floor(x)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (x - lo)

    return {
        "count": len(v),
        "mean": sum(v) / len(v),
        "min": v[0],
        "p50": pct(0.5),
        "p90": pct(0.9),
        "p99": pct(0.99),
        "max": v[-1],
    }


def trace_info(trace: Trace) -> dict[str, Any]:
    """What `trace info` prints, as one dict (a figure that does not apply is None)."""
    reqs = [r for r in trace.requests if r.kind != "wait"]  # a session graph's waits are not requests
    n = len(reqs)
    dur = trace.duration_s
    sessions: dict[str, int] = {}
    for r in reqs:
        if r.session_id is not None:
            sessions[r.session_id] = sessions.get(r.session_id, 0) + 1
    return {
        "path": trace.path,
        "format": trace.format,
        "requests": n,
        "duration_s": dur,
        # arrivals per second over the trace: 1 / the mean gap between consecutive requests
        "mean_rate_rps": (n - 1) / dur if n > 1 and dur > 0 else None,
        "input_len": _lengths([r.input_len for r in reqs if r.input_len is not None]),
        "output_len": _lengths([r.output_len for r in reqs if r.output_len is not None]),
        "given_prompts": sum(1 for r in reqs if r.prompt is not None or r.messages is not None),
        "sessions": len(sessions),
        "session_requests": sum(sessions.values()),
        "max_turns": max(sessions.values()) if sessions else None,
        "skipped": dict(sorted(trace.skipped.items())),
        "block_size": trace.block_size if any(r.hash_ids for r in reqs) else None,
        "block_reuse": trace_block_reuse(trace),
    }


def _fmt_lengths(d: dict[str, float] | None) -> str:
    if d is None:
        return "-"
    return (
        f"mean {d['mean']:.1f}, min {d['min']:g}, p50 {d['p50']:g}, p90 {d['p90']:g}, p99 {d['p99']:g}, "
        f"max {d['max']:g} (of {d['count']})"
    )


def _print_info(info: dict[str, Any]) -> None:
    rate = info["mean_rate_rps"]
    lines = [
        f"trace      {info['path']} ({info['format']})",
        f"requests   {info['requests']}"
        + (f" ({info['given_prompts']} with their own prompt or messages)" if info["given_prompts"] else ""),
        f"duration   {info['duration_s']:.3f} s, mean rate " + ("-" if rate is None else f"{rate:.3f} req/s"),
        f"input      {_fmt_lengths(info['input_len'])} tokens",
        f"output     {_fmt_lengths(info['output_len'])} tokens",
        f"sessions   {info['sessions']}"
        + (
            f" ({info['session_requests']} requests, at most {info['max_turns']} turns)"
            if info["sessions"]
            else ""
        ),
        "skipped    " + (", ".join(f"{n} {why}" for why, n in info["skipped"].items()) or "none"),
    ]
    if info["block_reuse"] is not None:
        lines.append(
            f"reuse      {info['block_reuse']:.1%} of prompt tokens in blocks of {info['block_size']} "
            f"seen before (the prefix-cache hit rate of an infinite cache)"
        )
    print("\n".join(lines))


def _export(a: argparse.Namespace) -> int:
    trace = load_trace(a.run, "records")
    text = "".join(to_jsonl_line(r) + "\n" for r in trace.requests)
    if a.output == "-":
        sys.stdout.write(text)
    else:
        write_atomic(a.output, text)
        sessions = len({r.session_id for r in trace.requests if r.session_id is not None})
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(trace.skipped.items()))
        print(
            f"{PROG} export: {len(trace.requests)} requests over {trace.duration_s:.3f} s ({sessions} sessions) "
            f"-> {a.output}" + (f"; skipped: {skipped}" if skipped else "")
        )
    return 0


@reported(PROG)
def main(argv: Sequence[str]) -> int:
    """`vllm-locust trace export RUN_DIR -o FILE` and `vllm-locust trace info FILE`; the exit code."""
    a = _parser().parse_args(list(argv))
    if a.action == "export":
        return _export(a)
    trace = load_trace(
        a.file,
        a.trace_format,
        start_s=a.trace_start,
        duration_s=a.trace_duration,
        limit=a.num_prompts,
        block_size=a.trace_block_size,
        timestamp_unit=a.trace_timestamp_unit,
    )
    info = trace_info(trace)
    if a.json:
        print(json.dumps(info))
    else:
        _print_info(info)
    return 0
