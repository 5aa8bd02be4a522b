"""`azure-lmm`: the Azure multimodal (LMM) inference trace of 2025 (CSV), each request's image count with its
lengths, timestamps as times of day."""

from __future__ import annotations

from collections import Counter

from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_formats._fields import csv_int, csv_rows, lengths_or_skip
from vllm_users.workload.trace_formats.azure import AzureClock
from vllm_users.workload.trace_formats.registry import Rows, Sniff, TraceFormat

__all__ = ["FORMAT", "read_azure_lmm"]

COLUMNS = ("TIMESTAMP", "NumImages", "ContextTokens", "GeneratedTokens")


def read_azure_lmm(path: str, unit_s: float = 1.0) -> Rows:
    """Azure LMM inference trace (2025): `TIMESTAMP`, `NumImages`, `ContextTokens`, `GeneratedTokens`; each
    request carries exactly its `NumImages` images (0: none, whatever --images says)."""
    out: list[TraceRequest] = []
    skipped: Counter[str] = Counter()
    clock = AzureClock()
    for n, (ts, images, ctx, gen) in csv_rows(path, COLUMNS):
        t = clock(ts, path, n)
        k = csv_int(images, "NumImages", path, n)
        inp, outl = csv_int(ctx, "ContextTokens", path, n), csv_int(gen, "GeneratedTokens", path, n)
        if lengths_or_skip(inp, outl, skipped):
            out.append(TraceRequest(t, input_len=inp, output_len=outl, images=k, line=n))
    return out, skipped


def _detect(s: Sniff) -> bool:
    return s.has_columns(*COLUMNS)


FORMAT = TraceFormat(
    name="azure-lmm",
    read=read_azure_lmm,
    rank=15,  # before `azure`, whose three columns its header also has
    summary="the Azure multimodal inference trace of 2025 (`Azure/AzurePublicDataset`): lengths and images",
    timestamp="a time of day",
    detected_by="a CSV header with `TIMESTAMP`, `NumImages`, `ContextTokens`, `GeneratedTokens`",
    detect=_detect,
)
