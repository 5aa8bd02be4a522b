"""`azure`: the Azure LLM inference traces of 2023 and 2024 (CSV), timestamps as times of day."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_formats._fields import bad, csv_int, csv_rows, lengths_or_skip
from vllm_users.workload.trace_formats.registry import Rows, Sniff, TraceFormat

__all__ = ["FORMAT", "AzureClock", "read_azure"]

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class AzureClock:
    """Azure's `TIMESTAMP` (`2023-11-16 18:15:46.6805900`, maybe `+00:00`) as epoch seconds, every digit of
    the fraction kept (datetime stops at microseconds); naive times are UTC. One row's second is parsed
    once: rows come in time order, so consecutive rows mostly share it."""

    def __init__(self) -> None:
        self.base = ""
        self.seconds = 0.0

    def __call__(self, text: str, path: str, line: int) -> float:
        """The epoch seconds of one cell (TraceError naming the line for a cell that is not a time)."""
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


def read_azure(path: str, unit_s: float = 1.0) -> Rows:
    """Azure LLM inference trace (2023, 2024): `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`."""
    out: list[TraceRequest] = []
    skipped: Counter[str] = Counter()
    clock = AzureClock()
    for n, (ts, ctx, gen) in csv_rows(path, COLUMNS):
        t = clock(ts, path, n)
        inp, outl = csv_int(ctx, "ContextTokens", path, n), csv_int(gen, "GeneratedTokens", path, n)
        if lengths_or_skip(inp, outl, skipped):
            out.append(TraceRequest(t, input_len=inp, output_len=outl, line=n))
    return out, skipped


def _detect(s: Sniff) -> bool:
    return s.has_columns(*COLUMNS)


FORMAT = TraceFormat(
    name="azure",
    read=read_azure,
    rank=20,
    summary="the Azure LLM inference traces of 2023 and 2024 (`Azure/AzurePublicDataset`): CSV of lengths",
    timestamp="a time of day",
    detected_by="a CSV header with `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`",
    detect=_detect,
)
