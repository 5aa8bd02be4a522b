"""`burstgpt`: BurstGPT's logs of ChatGPT and GPT-4 use (CSV), timestamps in seconds."""

from __future__ import annotations

import math
from collections import Counter

from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_formats._fields import bad, csv_int, csv_rows, lengths_or_skip
from vllm_users.workload.trace_formats.registry import Rows, Sniff, TraceFormat

__all__ = ["FORMAT", "read_burstgpt"]

COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def read_burstgpt(path: str, unit_s: float) -> Rows:
    """BurstGPT: `Timestamp` (s), `Request tokens`, `Response tokens`; 0 response tokens is a failed request."""
    out: list[TraceRequest] = []
    skipped: Counter[str] = Counter()
    for n, (ts, req, resp) in csv_rows(path, COLUMNS):
        try:
            t = float(ts)
        except ValueError:
            t = -1.0
        if not (t >= 0 and math.isfinite(t)):
            raise bad(path, n, "Timestamp", "a number >= 0", ts)
        inp, outl = csv_int(req, "Request tokens", path, n), csv_int(resp, "Response tokens", path, n)
        if outl == 0:
            skipped["failed"] += 1  # BurstGPT logs a failed request with 0 response tokens
        elif lengths_or_skip(inp, outl, skipped):
            out.append(TraceRequest(t * unit_s, input_len=inp, output_len=outl, line=n))
    return out, skipped


def _detect(s: Sniff) -> bool:
    return s.has_columns(*COLUMNS)


FORMAT = TraceFormat(
    name="burstgpt",
    read=read_burstgpt,
    rank=30,
    summary="BurstGPT's logs of ChatGPT and GPT-4 use (`HPMLL/BurstGPT`): CSV of lengths, failed rows counted",
    timestamp="seconds",
    unit_s=1.0,
    detected_by="a CSV header with `Timestamp`, `Request tokens`, `Response tokens`",
    detect=_detect,
)
