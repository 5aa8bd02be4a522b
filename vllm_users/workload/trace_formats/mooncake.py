"""`mooncake`: Mooncake's JSON-lines traces, prompt lengths in prefix blocks (`hash_ids`), timestamps in ms."""

from __future__ import annotations

from collections import Counter

from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_formats._fields import bad, int_field, json_lines, missing, number_field
from vllm_users.workload.trace_formats.registry import Rows, Sniff, TraceFormat

__all__ = ["FORMAT", "read_mooncake"]

_INTS = {int}


def read_mooncake(path: str, unit_s: float) -> Rows:
    """Mooncake: `timestamp` (ms unless told), `input_length`, `output_length`, `hash_ids` (ints)."""
    out: list[TraceRequest] = []
    skipped: Counter[str] = Counter()
    for n, d in json_lines(path):
        if "timestamp" not in d:
            raise missing(path, n, "timestamp")
        t = number_field(d, "timestamp", path, n) * unit_s
        inp = int_field(d, "input_length", path, n, least=1)
        outl = int_field(d, "output_length", path, n, least=0)
        ids = d.get("hash_ids")
        if ids is None:
            raise missing(path, n, "hash_ids")
        if type(ids) is not list or (ids and set(map(type, ids)) != _INTS):  # bools are not ids either
            raise bad(path, n, "hash_ids", "a list of integers", ids)
        if not outl:
            skipped["zero_output"] += 1
            continue
        out.append(TraceRequest(t, input_len=inp, output_len=outl, hash_ids=tuple(ids), line=n))
    return out, skipped


def _detect(s: Sniff) -> bool:
    keys = s.json_keys
    return keys is not None and ("hash_ids" in keys or "input_length" in keys)


FORMAT = TraceFormat(
    name="mooncake",
    read=read_mooncake,
    rank=10,
    summary="Mooncake's traces (`kvcache-ai/Mooncake`, `FAST25-release/traces/`): JSON lines with prefix blocks",
    timestamp="milliseconds",
    unit_s=1e-3,
    detected_by="JSON lines with `hash_ids` or `input_length`",
    detect=_detect,
)
