"""`Columns`, what every metric is computed on; the batch payload a worker packs; and the reader of records.cols.

Workers pack each batch's records as columns (`pack_records`) beside its JSON lines; the master writes them as
Arrow record batches (vllm_users.measure.records_store: records.parquet). records.cols, the columnar file of
runs from before records.parquet, is read here (`load_vlc1`) and no longer written. Its format
(little-endian), which is also the payload's:

    file  = frame*
    frame = b"VLC1" | u32 meta_len | u64 payload_len | meta (JSON) | payload
    meta  = {"jsonl_end": byte offset in records.jsonl just after the records of this frame, "torn": N}
    payload = u32 header_len | header (JSON) | body, header = {"v": 1, "n": records,
              "cols": [[name, numpy dtype str, byte offset in body, count], ...], "tables": {name: [str|None]}}

A kill leaves at most a torn last frame, which `load_vlc1` skips with a warning. `jsonl_end` ties the two
files together: records.jsonl bytes after the last frame's `jsonl_end` are parsed from the JSONL, so the
columns hold exactly what records.jsonl holds.

Columns: t_start/t_intended (float64, NaN = None), end_us, prompt/output/cached tokens, input_len,
output_len, seq, session (int64, -1 = None), user/turn/status (int32, -1 = None turn), valid (int8 -1/0/1),
tokens_estimated (bool), scenario/worker/endpoint/finish_reason/error and (None in older frames)
request_class/model (int32 codes into string tables),
chunk_lens (int32) and the flat chunk_times_us (int32, int64 when a value needs it). extra is only in
records.jsonl, but for its `no_done` flag (bool column no_done; False in older frames) and its `content_encoding`
(a string column), `chunks_at_once` and `usage_tokens` (int64 columns, -1 = None; -1 in older frames).
error_detail is a string column too (None in frames written before it).
Reasoning and non-streaming: answer_us and reasoning_tokens (int64, -1 = None), reasoning_estimated
and not_streamed (bool); frames written before them read as None / False.
Images: images and image_tokens (int64, -1 = None). Several servers: host and replica (string columns; None in
older frames and in a run against one URL).
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

from vllm_users.measure.record import RequestRecord, parse_lines
from vllm_users.run_dir import COLS, RECORDS

log = logging.getLogger("vllm_locust")

MAGIC = b"VLC1"
_FRAME = struct.Struct("<4sIQ")
_U32 = struct.Struct("<I")

_F8, _I8, _I4, _I1 = np.dtype("<f8"), np.dtype("<i8"), np.dtype("<i4"), np.dtype("i1")
# name -> (dtype, None sentinel) for the per-record numeric columns
NUMERIC: dict[str, tuple[np.dtype, Any]] = {
    "t_start": (_F8, math.nan),
    "t_intended": (_F8, math.nan),
    "end_us": (_I8, 0),
    "prompt_tokens": (_I8, -1),
    "output_tokens": (_I8, -1),
    "cached_tokens": (_I8, -1),
    "input_len": (_I8, -1),
    "output_len": (_I8, -1),
    "seq": (_I8, -1),
    "session": (_I8, -1),
    "user": (_I4, -1),
    "turn": (_I4, -1),
    "status": (_I4, 0),
    "answer_us": (_I8, -1),  # reasoning streamed: first answer chunk (columns newer than a file: -1 there)
    "reasoning_tokens": (_I8, -1),
    "images": (_I8, -1),  # image_url parts sent, and their tokens where known
    "image_tokens": (_I8, -1),
}
FLAGS = ("reasoning_estimated", "not_streamed")  # bool record fields, None/absent = False
STRINGS = (
    "scenario",
    "worker",
    "endpoint",
    "finish_reason",
    "error",
    "request_class",
    "model",
    "error_detail",
    "host",
    "replica",
)
EXTRA_STRINGS = ("content_encoding",)  # strings kept in a record's extra (None when absent)
# whole numbers kept in a record's extra (-1 when absent): the chunks of a success delivered at once, and the
# output tokens usage said where it said fewer than the chunks streamed (record.py: record_from_stream)
EXTRA_INTS = ("chunks_at_once", "usage_tokens")


# ----------------------------------------------------------------------------------------------- packing
def pack_records(recs: Sequence[RequestRecord]) -> bytes:
    """One payload holding `recs` as columns (what a worker sends with each batch; a few µs per record)."""
    n = len(recs)
    arrays: dict[str, np.ndarray] = {}
    for name, (dt, none) in NUMERIC.items():
        arrays[name] = np.fromiter(
            (none if (v := getattr(r, name)) is None else v for r in recs), dtype=dt, count=n
        )
    arrays["tokens_estimated"] = np.fromiter((r.tokens_estimated for r in recs), dtype=np.bool_, count=n)
    no_done = (r.extra is not None and r.extra.get("no_done") is True for r in recs)
    arrays["no_done"] = np.fromiter(no_done, dtype=np.bool_, count=n)
    for name in FLAGS:
        arrays[name] = np.fromiter((getattr(r, name) is True for r in recs), dtype=np.bool_, count=n)
    for name in EXTRA_INTS:
        arrays[name] = np.fromiter((_extra_int(r.extra, name) for r in recs), dtype=_I8, count=n)
    arrays["valid"] = np.fromiter((-1 if r.valid is None else int(r.valid) for r in recs), dtype=_I1, count=n)
    tables: dict[str, list[str | None]] = {}
    for name in STRINGS:
        idx: dict[str | None, int] = {}
        arrays[name] = np.fromiter(
            (idx.setdefault(getattr(r, name), len(idx)) for r in recs), dtype=_I4, count=n
        )
        tables[name] = list(idx)
    for name in EXTRA_STRINGS:
        idx = {}
        arrays[name] = np.fromiter(
            (idx.setdefault(None if r.extra is None else r.extra.get(name), len(idx)) for r in recs),
            dtype=_I4,
            count=n,
        )
        tables[name] = list(idx)
    lens = np.fromiter((len(r.chunk_times_us) for r in recs), dtype=_I4, count=n)
    total = int(lens.sum())
    flat = np.fromiter(
        itertools.chain.from_iterable([r.chunk_times_us for r in recs]), dtype=_I8, count=total
    )
    if total and -(1 << 31) <= int(flat.min()) and int(flat.max()) < (1 << 31):
        flat = flat.astype(_I4)
    arrays["chunk_lens"] = lens
    arrays["chunks"] = flat
    return _pack(n, arrays, tables)


def _extra_int(extra: dict[str, Any] | None, name: str) -> int:
    """A whole number of a record's extra; -1 when absent (or not a whole number: a scenario's own key)."""
    v = None if extra is None else extra.get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


def _pack(n: int, arrays: dict[str, np.ndarray], tables: dict[str, list[str | None]]) -> bytes:
    cols = []
    parts: list[bytes] = []
    off = 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        pad = (-off) % 8
        if pad:
            parts.append(b"\0" * pad)
            off += pad
        cols.append([name, a.dtype.str, off, int(a.size)])
        b = a.tobytes()
        parts.append(b)
        off += len(b)
    header = json.dumps({"v": 1, "n": n, "cols": cols, "tables": tables}, separators=(",", ":")).encode()
    header += b" " * ((-(len(header) + 4)) % 8)  # body starts 8-aligned inside the payload
    return _U32.pack(len(header)) + header + b"".join(parts)


def frame(payload: bytes, jsonl_end: int, torn: int = 0) -> bytes:
    """A payload framed for appending to records.cols."""
    meta = json.dumps({"jsonl_end": jsonl_end, "torn": torn}, separators=(",", ":")).encode()
    return _FRAME.pack(MAGIC, len(meta), len(payload)) + meta + payload


def _unpack(buf: memoryview) -> tuple[int, dict[str, np.ndarray], dict[str, list[str | None]]]:
    (hlen,) = _U32.unpack_from(buf, 0)
    header = json.loads(bytes(buf[4 : 4 + hlen]))
    base = 4 + hlen
    arrays = {
        name: np.frombuffer(buf, dtype=np.dtype(dt), count=count, offset=base + off)
        for name, dt, off, count in header["cols"]
    }
    return int(header["n"]), arrays, header["tables"]


# ----------------------------------------------------------------------------------------------- reading
@dataclass
class Columns:
    """Records as numpy columns (record order = records.jsonl order)."""

    n: int
    a: dict[str, np.ndarray]
    tables: dict[str, list[str | None]]
    chunks: np.ndarray  # flat chunk_times_us of every record
    lens: np.ndarray  # int64 chunk count per record
    starts: np.ndarray  # int64 offset of each record's first chunk in `chunks`
    torn_lines: int = 0  # torn/unparseable records.jsonl lines (as read_records counts them)
    warnings: list[str] = field(default_factory=list)

    def code(self, column: str, value: str | None) -> int:
        """The code of `value` in a string column; -2 when absent."""
        t = self.tables[column]
        return t.index(value) if value in t else -2

    def strings(self, column: str, idx: np.ndarray) -> list[str | None]:
        """The string values of a column at `idx`."""
        t = self.tables[column]
        return [t[i] for i in self.a[column][idx].tolist()]

    def first_chunk(self, idx: np.ndarray) -> np.ndarray:
        """chunk_times_us[0] of records `idx` (each must have chunks)."""
        return self.chunks[self.starts[idx]]

    def last_chunk(self, idx: np.ndarray) -> np.ndarray:
        """chunk_times_us[-1] of records `idx` (each must have chunks)."""
        return self.chunks[self.starts[idx] + self.lens[idx] - 1]


def _merge(parts: list[tuple[int, dict[str, np.ndarray], dict[str, list[str | None]]]]) -> Columns:
    n = sum(p[0] for p in parts)
    a: dict[str, np.ndarray] = {}
    for name, (dt, none) in NUMERIC.items():  # a column newer than a file's frames reads as None there
        cols = [p[1][name] if name in p[1] else np.full(p[0], none, dt) for p in parts]
        a[name] = np.concatenate(cols) if parts else np.zeros(0, dt)
    a["tokens_estimated"] = (
        np.concatenate([p[1]["tokens_estimated"] for p in parts]) if parts else np.zeros(0, bool)
    )
    no_done = [
        p[1]["no_done"] if "no_done" in p[1] else np.zeros(p[0], bool) for p in parts
    ]  # older frames: none
    a["no_done"] = np.concatenate(no_done) if parts else np.zeros(0, bool)
    for name in EXTRA_INTS:  # older frames: none
        ints = [p[1][name] if name in p[1] else np.full(p[0], -1, _I8) for p in parts]
        a[name] = np.concatenate(ints) if parts else np.zeros(0, _I8)
    for name in FLAGS:  # older frames: none
        flag = [p[1][name] if name in p[1] else np.zeros(p[0], bool) for p in parts]
        a[name] = np.concatenate(flag) if parts else np.zeros(0, bool)
    a["valid"] = np.concatenate([p[1]["valid"] for p in parts]) if parts else np.zeros(0, _I1)
    tables: dict[str, list[str | None]] = {}
    for name in (*STRINGS, *EXTRA_STRINGS):
        gidx: dict[str | None, int] = {}
        mapped = []
        for _n, arrays, tabs in parts:
            if name not in tabs:  # a column newer than the frame (request_class, model): None there
                mapped.append(np.full(_n, gidx.setdefault(None, len(gidx)), _I4))
                continue
            m = np.array([gidx.setdefault(s, len(gidx)) for s in tabs[name]] or [0], dtype=_I4)
            mapped.append(m[arrays[name]])
        a[name] = np.concatenate(mapped) if mapped else np.zeros(0, _I4)
        tables[name] = list(gidx)
    lens = (
        np.concatenate([p[1]["chunk_lens"] for p in parts]).astype(np.int64)
        if parts
        else np.zeros(0, np.int64)
    )
    chunk_parts = [p[1]["chunks"] for p in parts]
    chunks = np.concatenate(chunk_parts) if chunk_parts else np.zeros(0, _I4)
    starts = np.cumsum(lens) - lens
    return Columns(n, a, tables, chunks, lens, starts)


def _read_frames(path: str) -> tuple[list[tuple[int, memoryview, int]], int]:
    """(jsonl_end, payload, torn lines) of every complete frame, and how many torn/bad frames were skipped."""
    with open(path, "rb") as fh:
        data = memoryview(fh.read())
    out = []
    pos, bad = 0, 0
    while pos < len(data):
        if len(data) - pos < _FRAME.size:
            bad += 1
            break
        magic, mlen, plen = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + mlen + plen
        if magic != MAGIC or end > len(data):
            bad += 1
            break
        meta = json.loads(bytes(data[pos + _FRAME.size : pos + _FRAME.size + mlen]))
        out.append((int(meta["jsonl_end"]), data[pos + _FRAME.size + mlen : end], int(meta.get("torn", 0))))
        pos = end
    return out, bad


def jsonl_tail(path: str, offset: int) -> tuple[list[RequestRecord], int]:
    """The records of records.jsonl from byte `offset` on, and how many torn lines were skipped."""
    with open(path, "rb") as raw:
        raw.seek(offset)
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as fh:
            return parse_lines(fh)


def load_vlc1(run_dir: str) -> Columns:
    """An older run directory's records.cols, completed by any records.jsonl tail it lacks (the one reader,
    vllm_users.measure.records_store.load_columns, comes here for them). Torn frames and lines are skipped and
    counted."""
    cols_path = os.path.join(run_dir, COLS)
    jsonl_path = os.path.join(run_dir, RECORDS)
    jsonl_size = os.path.getsize(jsonl_path) if os.path.exists(jsonl_path) else None
    warnings: list[str] = []
    frames, bad = _read_frames(cols_path)
    if bad:
        warnings.append(f"{COLS}: a torn last frame was skipped (killed master?)")
        log.warning("vllm-locust: %s: torn last frame skipped", cols_path)
    if jsonl_size is not None:
        # frames that know of JSONL bytes the file lacks (its buffer was lost in a kill) are left out:
        # their records come from the JSONL, like everything after the last frame
        frames = list(itertools.takewhile(lambda f: f[0] <= jsonl_size, frames))
    parts = [_unpack(p) for _end, p, _t in frames]
    torn = sum(t for _e, _p, t in frames)
    offset = frames[-1][0] if frames else 0
    if jsonl_size is not None and jsonl_size > offset:
        tail, tail_torn = jsonl_tail(jsonl_path, offset)
        torn += tail_torn
        if tail:
            parts.append(_unpack(memoryview(pack_records(tail))))
    c = _merge(parts)
    c.torn_lines = torn
    c.warnings = warnings
    return c


def columns_from_records(recs: Sequence[RequestRecord]) -> Columns:
    """Columns of in-memory records (tests, conversions)."""
    return _merge([_unpack(memoryview(pack_records(list(recs))))]) if recs else _merge([])


Records: TypeAlias = Columns | Sequence[RequestRecord]  # what the metric functions take


def as_columns(records: Records) -> Columns:
    """`records` as Columns (a list of RequestRecords is packed once)."""
    return records if isinstance(records, Columns) else columns_from_records(records)
