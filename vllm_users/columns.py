"""Columnar records: `records.cols` beside `records.jsonl`, and every metric of `vllm_users.metrics` on columns.

records.jsonl stays the human/interchange format; records.cols is an index that makes post-processing
fast (1 M records x 128 chunks: ~1 s to load instead of ~25 s of JSON). Format (little-endian):

    file  = frame*
    frame = b"VLC1" | u32 meta_len | u64 payload_len | meta (JSON) | payload
    meta  = {"jsonl_end": byte offset in records.jsonl just after the records of this frame, "torn": N}
    payload = u32 header_len | header (JSON) | body, header = {"v": 1, "n": records,
              "cols": [[name, numpy dtype str, byte offset in body, count], ...], "tables": {name: [str|None]}}

Workers pack one payload per batch (`pack_records`); the master frames and appends it (append-only: a
kill leaves at most a torn last frame, which `load_columns` skips with a warning). `jsonl_end` ties the
two files together: records.jsonl bytes after the last frame's `jsonl_end` (a batch the master wrote to
the JSONL but not to the columns) are parsed from the JSONL, so the columns always hold exactly what
records.jsonl holds. A run directory without records.cols is converted once.

Columns: t_start/t_intended (float64, NaN = None), end_us, prompt/output/cached tokens, input_len,
output_len, seq (int64, -1 = None), user/turn/status (int32, -1 = None turn), valid (int8 -1/0/1),
tokens_estimated (bool), scenario/worker/endpoint/finish_reason/error (int32 codes into string tables),
chunk_lens (int32) and the flat chunk_times_us (int32, int64 when a value needs it). error_detail and
extra are only in records.jsonl.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
import math
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vllm_users import metrics as M
from vllm_users.metrics import DEFAULT_PERCENTILES, METRICS, Slo
from vllm_users.record import RequestRecord, parse_lines

log = logging.getLogger("vllm_locust")

COLS_FILE = "records.cols"
RECORDS_FILE = "records.jsonl"
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
    "user": (_I4, -1),
    "turn": (_I4, -1),
    "status": (_I4, 0),
}
STRINGS = ("scenario", "worker", "endpoint", "finish_reason", "error")
# ITL pools every gap of every request (1 M x 128 -> 127 M samples): above this many, statistics come from
# exact integer-µs counts (np.bincount) instead of a float sort; same values up to float rounding.
ITL_COUNT_THRESHOLD = 2_000_000
_MAX_COUNT_BINS = 1 << 27  # gaps up to ~134 s use counts; larger gaps fall back to sorting


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
    arrays["valid"] = np.fromiter((-1 if r.valid is None else int(r.valid) for r in recs), dtype=_I1, count=n)
    tables: dict[str, list[str | None]] = {}
    for name in STRINGS:
        idx: dict[str | None, int] = {}
        arrays[name] = np.fromiter(
            (idx.setdefault(getattr(r, name), len(idx)) for r in recs), dtype=_I4, count=n
        )
        tables[name] = list(idx)
    lens = np.fromiter((len(r.chunk_times_us) for r in recs), dtype=_I4, count=n)
    total = int(lens.sum())
    flat = np.fromiter(itertools.chain.from_iterable([r.chunk_times_us for r in recs]), dtype=_I8, count=total)
    if total and -(1 << 31) <= int(flat.min()) and int(flat.max()) < (1 << 31):
        flat = flat.astype(_I4)
    arrays["chunk_lens"] = lens
    arrays["chunks"] = flat
    return _pack(n, arrays, tables)


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
    for name, (dt, _none) in NUMERIC.items():
        a[name] = np.concatenate([p[1][name] for p in parts]) if parts else np.zeros(0, dt)
    a["tokens_estimated"] = np.concatenate([p[1]["tokens_estimated"] for p in parts]) if parts else np.zeros(0, bool)
    a["valid"] = np.concatenate([p[1]["valid"] for p in parts]) if parts else np.zeros(0, _I1)
    tables: dict[str, list[str | None]] = {}
    for name in STRINGS:
        gidx: dict[str | None, int] = {}
        mapped = []
        for _n, arrays, tabs in parts:
            m = np.array([gidx.setdefault(s, len(gidx)) for s in tabs[name]] or [0], dtype=_I4)
            mapped.append(m[arrays[name]])
        a[name] = np.concatenate(mapped) if mapped else np.zeros(0, _I4)
        tables[name] = list(gidx)
    lens = np.concatenate([p[1]["chunk_lens"] for p in parts]).astype(np.int64) if parts else np.zeros(0, np.int64)
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


def _jsonl_tail(path: str, offset: int) -> tuple[list[RequestRecord], int]:
    with open(path, "rb") as raw:
        raw.seek(offset)
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as fh:
            return parse_lines(fh)


def load_columns(run_dir: str, *, convert: bool = True) -> Columns:
    """The run's records as columns: records.cols, completed by any records.jsonl tail it lacks.

    Without records.cols, records.jsonl is read (slow, once) and, with `convert`, records.cols is written
    so that the next load is fast. Torn frames and torn JSONL lines are skipped and counted.
    """
    cols_path = os.path.join(run_dir, COLS_FILE)
    jsonl_path = os.path.join(run_dir, RECORDS_FILE)
    jsonl_size = os.path.getsize(jsonl_path) if os.path.exists(jsonl_path) else None
    warnings: list[str] = []
    frames: list[tuple[int, memoryview, int]] = []
    had_cols = os.path.exists(cols_path)
    if had_cols:
        frames, bad = _read_frames(cols_path)
        if bad:
            warnings.append(f"{COLS_FILE}: a torn last frame was skipped (killed master?)")
            log.warning("vllm-locust: %s: torn last frame skipped", cols_path)
        if jsonl_size is not None:
            # frames that know of JSONL bytes the file lacks (its buffer was lost in a kill) are left out:
            # their records come from the JSONL, like everything after the last frame
            frames = list(itertools.takewhile(lambda f: f[0] <= jsonl_size, frames))
    parts = [_unpack(p) for _end, p, _t in frames]
    torn = sum(t for _e, _p, t in frames)
    offset = frames[-1][0] if frames else 0
    if jsonl_size is not None and jsonl_size > offset:
        tail, tail_torn = _jsonl_tail(jsonl_path, offset)
        torn += tail_torn
        if tail:
            parts.append(_unpack(memoryview(pack_records(tail))))
        if convert and not had_cols:  # a run directory from before records.cols: convert once
            _write_converted(cols_path, tail, jsonl_size, tail_torn)
    c = _merge(parts)
    c.torn_lines = torn
    c.warnings = warnings
    return c


def _write_converted(path: str, recs: list[RequestRecord], jsonl_end: int, torn: int) -> None:
    """Cache a JSONL conversion as records.cols (best effort: a read-only run directory is fine)."""
    try:
        with open(path + ".tmp", "wb") as fh:
            fh.write(frame(pack_records(recs), jsonl_end, torn))
        os.replace(path + ".tmp", path)
    except OSError as e:
        log.info("vllm-locust: could not write %s (%s); columns not cached", path, e)


def columns_from_records(recs: Sequence[RequestRecord]) -> Columns:
    """Columns of in-memory records (tests, conversions)."""
    return _merge([_unpack(memoryview(pack_records(list(recs))))]) if recs else _merge([])


# ----------------------------------------------------------------------------------------------- metrics
def _lerp(a: float, b: float, t: float) -> float:
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t  # numpy's _lerp


def _stats_from_counts(values_ms: np.ndarray, counts: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    """stats_ms of a multiset given as sorted distinct values and their counts (numpy's definitions)."""
    n = int(counts.sum())
    if n == 0:
        return M.stats_ms(np.zeros(0), percentiles)
    cum = np.cumsum(counts)

    def kth(k: int) -> float:
        return float(values_ms[int(np.searchsorted(cum, k, side="right"))])

    w = counts.astype(np.float64)
    mean = float((values_ms * w).sum() / n)
    std = float(math.sqrt(float((((values_ms - mean) ** 2) * w).sum()) / n))
    median = kth((n - 1) // 2) if n % 2 else (kth(n // 2 - 1) + kth(n // 2)) / 2
    out = {"mean": mean, "median": median, "std": std}
    for p in percentiles:
        v = (n - 1) * (float(p) / 100.0)
        lo = math.floor(v)
        out[f"p{M._pname(p)}"] = kth(n - 1) if lo >= n - 1 else _lerp(kth(lo), kth(lo + 1), v - lo)
    return out


def _ok_flat(c: Columns, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flat chunks of records `ok` (in order) and their lengths; no copy when they are all records with chunks."""
    lens = c.lens[ok]
    if int(lens.sum()) == c.chunks.size:
        return c.chunks, lens
    mask = np.zeros(c.n, dtype=bool)
    mask[ok] = True
    return c.chunks[np.repeat(mask, c.lens)], lens


def _itl_ints(flat: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """All in-record gaps (µs, ints) in record order; cross-record gaps removed."""
    if flat.size - lens.size <= 0:
        return np.zeros(0, dtype=np.int64)
    gaps = np.diff(flat)
    mask = np.ones(gaps.size, dtype=bool)
    mask[np.cumsum(lens)[:-1] - 1] = False
    return gaps[mask]


def _itl_stats(flat: np.ndarray, lens: np.ndarray, percentiles: Sequence[float], block: int = 1 << 20) -> dict[str, float]:
    n_itl = flat.size - lens.size
    if n_itl > ITL_COUNT_THRESHOLD:
        ends = np.cumsum(lens)
        span = int((flat[ends - 1] - flat[ends - lens]).max())  # no in-record gap is larger (monotone chunks)
        if span < _MAX_COUNT_BINS:
            bounds = ends[:-1] - 1  # gap positions that cross a record boundary
            counts = np.zeros(span + 1, dtype=np.int64)
            buf = np.empty(min(block, flat.size - 1), dtype=np.int64)
            try:
                for s in range(0, flat.size - 1, block):  # blocks: temporaries stay in cache, no 1 GB arrays
                    e = min(s + block, flat.size - 1)
                    g = buf[: e - s]
                    np.subtract(flat[s + 1 : e + 1], flat[s:e], out=g, casting="unsafe")
                    g[bounds[np.searchsorted(bounds, s) : np.searchsorted(bounds, e)] - s] = 0
                    part = np.bincount(g, minlength=counts.size)
                    if part.size > counts.size:
                        raise ValueError("gap larger than the record span")
                    counts += part
            except ValueError:  # a negative gap (non-monotone chunk times): sort instead
                pass
            else:
                counts[0] -= bounds.size
                vals = np.flatnonzero(counts)
                return _stats_from_counts(vals / 1e6 * 1000.0, counts[vals], percentiles)
    return M.stats_ms(_itl_ints(flat, lens) / 1e6, percentiles)


def _tpot(c: Columns, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TPOT (s) of records `ok` with output_tokens > 1, and that mask over `ok`."""
    out = c.a["output_tokens"][ok]
    keep = out > 1
    k = ok[keep]
    return (c.last_chunk(k) - c.first_chunk(k)) / 1e6 / (out[keep] - 1).astype(np.float64), keep


def metric_arrays_columns(c: Columns, idx: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """`metrics.metric_arrays` on columns (same arrays)."""
    ok = _ok(c, _all(c) if idx is None else idx)
    flat, lens = _ok_flat(c, ok)
    return {
        "ttft": c.first_chunk(ok).astype(np.float64) / 1e6,
        "tpot": np.asarray(_tpot(c, ok)[0], dtype=np.float64),
        "itl": _itl_ints(flat, lens) / 1e6,
        "e2el": c.last_chunk(ok).astype(np.float64) / 1e6,
    }


def plot_arrays(c: Columns, max_sample: int, seed: int = 0) -> dict[str, np.ndarray]:
    """metric_arrays for plots: ITL as the very subsample `plots.cdf_points` would draw (no 1 GB float array)."""
    ok = _ok(c, _all(c))
    flat, lens = _ok_flat(c, ok)
    n_itl = flat.size - lens.size
    out = {
        "ttft": c.first_chunk(ok).astype(np.float64) / 1e6,
        "tpot": np.asarray(_tpot(c, ok)[0], dtype=np.float64),
        "e2el": c.last_chunk(ok).astype(np.float64) / 1e6,
    }
    if n_itl > max_sample:
        pick = np.random.default_rng(seed).integers(0, n_itl, max_sample)
        # gap j (cross-record gaps removed) sits at diff position j + (records ended before it)
        ends = np.cumsum(lens)
        first_gap = ends - lens - np.arange(lens.size)  # index of each record's first gap among kept gaps
        rec = np.searchsorted(first_gap, pick, side="right") - 1
        pos = pick + rec  # position in np.diff(flat)
        out["itl"] = (flat[pos + 1] - flat[pos]) / 1e6
    else:
        out["itl"] = _itl_ints(flat, lens) / 1e6
    return out


def _all(c: Columns) -> np.ndarray:
    return np.arange(c.n, dtype=np.int64)


def _not_dropped(c: Columns, idx: np.ndarray) -> np.ndarray:
    return idx[c.a["error"][idx] != c.code("error", "dropped")]


def _ok(c: Columns, sent: np.ndarray) -> np.ndarray:
    return sent[(c.a["error"][sent] == c.code("error", None)) & (c.lens[sent] > 0)]


def _pos(a: np.ndarray) -> np.ndarray:
    """`value or 0` of a column with -1 for None."""
    return np.maximum(a, 0)


def duration_columns(c: Columns, idx: np.ndarray) -> float:
    """metrics.duration_s on columns."""
    sent = _not_dropped(c, idx)
    if not sent.size:
        return 0.0
    ts = c.a["t_start"][sent]
    last = float((ts + c.a["end_us"][sent].astype(np.float64) / 1e6).max())
    return max(last - float(ts.min()), 1e-9)


def _peak_concurrency(c: Columns, sent: np.ndarray) -> int:
    if not sent.size:
        return 0
    starts = c.a["t_start"][sent]
    ends = starts + c.a["end_us"][sent].astype(np.float64) / 1e6
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(sent.size), -np.ones(sent.size)])
    order = np.lexsort((deltas, times))
    return int(np.cumsum(deltas[order]).max())


def _peak_tokens(c: Columns, ok: np.ndarray, block: int = 1 << 13) -> float:
    if not ok.size:
        return 0.0
    ts = c.a["t_start"][ok]
    base = ts - ts.min()
    lens = c.lens[ok]
    tok = c.a["output_tokens"][ok]
    w = np.where(tok > 0, tok, lens).astype(np.float64) / lens.astype(np.float64)
    flat, _ = _ok_flat(c, ok)
    ends = np.cumsum(lens)
    total: Any = np.zeros(0)
    for b0 in range(0, ok.size, block):  # blocks keep the per-chunk temporaries in cache
        b1 = min(b0 + block, ok.size)
        lo, hi = int(ends[b0] - lens[b0]), int(ends[b1 - 1])
        bl = lens[b0:b1]
        x = np.repeat(base[b0:b1], bl)
        x += flat[lo:hi] / 1e6  # the same float operations as metrics.peak_output_tokens_per_s
        buckets = x.astype(np.int64)
        part: Any = np.bincount(buckets, weights=np.repeat(w[b0:b1], bl))
        if part.size > total.size:
            part[: total.size] += total
            total = part
        else:
            total[: part.size] += part
    return float(total.max())


def _counter(c: Columns, column: str, idx: np.ndarray) -> list[tuple[int, int]]:
    """(code, count) of a column over idx, in order of first occurrence (like collections.Counter)."""
    if not idx.size:
        return []
    vals = c.a[column][idx]
    uniq, first, counts = np.unique(vals, return_index=True, return_counts=True)
    order = np.argsort(first)
    return [(int(uniq[i]), int(counts[i])) for i in order]


class _Cache:
    """Latency statistics of one success set, shared by the overall and per-scenario computations."""

    def __init__(self) -> None:
        self.d: dict[tuple[bytes, tuple[float, ...]], dict[str, float]] = {}

    def stats(self, c: Columns, ok: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
        key = (hashlib.blake2b(ok.tobytes(), digest_size=16).digest(), tuple(percentiles))
        if key not in self.d:
            res: dict[str, float] = {}
            flat, lens = _ok_flat(c, ok)
            arrays = {
                "ttft": c.first_chunk(ok).astype(np.float64) / 1e6,
                "tpot": np.asarray(_tpot(c, ok)[0], dtype=np.float64),
                "e2el": c.last_chunk(ok).astype(np.float64) / 1e6,
            }
            for m in METRICS:
                st = _itl_stats(flat, lens, percentiles) if m == "itl" else M.stats_ms(arrays[m], percentiles)
                for k, v in st.items():
                    res[f"{k}_{m}_ms"] = v
            res["max_output_tokens_per_s"] = _peak_tokens(c, ok)
            self.d[key] = res
        return self.d[key]


def compute_metrics_columns(
    c: Columns,
    idx: np.ndarray | None = None,
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    duration: float | None = None,
    cache: _Cache | None = None,
) -> dict[str, Any]:
    """`metrics.compute_metrics` of records `idx` (default all), on columns."""
    idx = _all(c) if idx is None else idx
    cache = cache or _Cache()
    err = c.a["error"]
    sent = _not_dropped(c, idx)
    ok = _ok(c, sent)
    interrupted = int((err[sent] == c.code("error", "interrupted")).sum())
    failed = sent.size - ok.size - interrupted
    dur = duration if duration is not None else duration_columns(c, idx)
    dur = dur or 1e-9
    total_in = int(_pos(c.a["prompt_tokens"][ok]).sum())
    total_out = int(_pos(c.a["output_tokens"][ok]).sum())
    lat = cache.stats(c, ok, percentiles)
    res: dict[str, Any] = {
        "duration": dur,
        "completed": int(ok.size),
        "failed": int(failed),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": ok.size / dur,
        "request_goodput": None,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": lat["max_output_tokens_per_s"],
        "max_concurrent_requests": _peak_concurrency(c, sent),
    }
    for m in METRICS:
        for k in ("mean", "median", "std", *(f"p{M._pname(p)}" for p in percentiles)):
            res[f"{k}_{m}_ms"] = lat[f"{k}_{m}_ms"]
    if slo is not None:
        values = {"ttft": c.first_chunk(ok) / 1e3, "e2el": c.last_chunk(ok) / 1e3}
        tp, keep = _tpot(c, ok)
        tpot_ms = np.zeros(ok.size)
        tpot_ms[keep] = tp * 1e3
        values["tpot"] = tpot_ms
        met = {k: values[k] <= lim for k, lim in slo.limits_ms.items()}
        good_mask = np.ones(ok.size, dtype=bool)
        for m_ in met.values():
            good_mask &= m_
        good = int(good_mask.sum())
        res["request_goodput"] = good / dur
        res["goodput"] = {
            "slo_ms": dict(slo.limits_ms),
            "good": good,
            "good_fraction": good / ok.size if ok.size else 0.0,
            "per_metric_met_fraction": {k: (int(m_.sum()) / ok.size if ok.size else 0.0) for k, m_ in met.items()},
        }
    res.update(_extras(c, sent, ok, idx, percentiles))
    res["interrupted"] = interrupted
    return res


def _extras(c: Columns, sent: np.ndarray, ok: np.ndarray, idx: np.ndarray, percentiles: Sequence[float]) -> dict[str, Any]:
    err = c.a["error"]
    e_sent = err[sent]
    failed_rows = sent[(e_sent != c.code("error", None)) & (e_sent != c.code("error", "interrupted"))]
    errors = {c.tables["error"][k]: n for k, n in _counter(c, "error", failed_rows)}
    http_rows = sent[e_sent == c.code("error", "http")]
    statuses = {str(k): n for k, n in _counter(c, "status", http_rows)}
    chunks = int(c.lens[ok].sum())
    out_tokens = int(_pos(c.a["output_tokens"][ok]).sum())
    cached_col = c.a["cached_tokens"][ok]
    has_cached = cached_col != -1
    prompt = int(_pos(c.a["prompt_tokens"][ok][has_cached]).sum())
    cached = int(_pos(cached_col[has_cached]).sum())
    scheduled = int((~np.isnan(c.a["t_intended"][idx])).sum())
    dropped = int((err[idx] == c.code("error", "dropped")).sum())
    extras: dict[str, Any] = {
        "errors_by_kind": errors,
        "http_errors_by_status": statuses,
        "chunk_token_ratio": (chunks / out_tokens) if out_tokens else None,
        "tokens_estimated_requests": int(c.a["tokens_estimated"][ok].sum()),
        "prefix_cache_hit_rate": (cached / prompt) if prompt else None,
        "cached_tokens_reported": bool(has_cached.any()),
    }
    valid = c.a["valid"][sent]
    validated = valid != -1
    extras["validity_rate"] = (int((valid[validated] == 1).sum()) / int(validated.sum())) if validated.any() else None
    req = ok[(c.a["input_len"][ok] != -1) & (c.a["prompt_tokens"][ok] != -1)]
    if req.size:
        extras["input_len_requested_mean"] = float(np.mean(c.a["input_len"][req]))
        extras["input_len_actual_mean"] = float(np.mean(c.a["prompt_tokens"][req]))
    if scheduled:
        extras["arrivals"] = arrival_stats_columns(c, idx, percentiles)
    else:
        extras["arrivals"] = {"scheduled": 0, "sent": int(sent.size), "dropped": dropped}
    return extras


def arrival_stats_columns(c: Columns, idx: np.ndarray, percentiles: Sequence[float]) -> dict[str, Any]:
    """`metrics.arrival_stats` on columns."""
    sched = idx[~np.isnan(c.a["t_intended"][idx])]
    sent = _not_dropped(c, sched)
    ts, ti = c.a["t_start"], c.a["t_intended"]
    lag = ts[sent] - ti[sent]
    ok = _ok(c, sent)
    base = ts[ok] - ti[ok]
    return {
        "scheduled": int(sched.size),
        "sent": int(sent.size),
        "dropped": int(sched.size - sent.size),
        "late": int((lag > M.LATE_THRESHOLD_S).sum()) if lag.size else 0,
        "late_threshold_ms": M.LATE_THRESHOLD_S * 1000,
        "schedule_lag_ms": M.stats_ms(lag, percentiles),
        "ttft_from_intended_ms": M.stats_ms(base + c.first_chunk(ok) / 1e6, percentiles),
        "e2el_from_intended_ms": M.stats_ms(base + c.last_chunk(ok) / 1e6, percentiles),
    }


def per_scenario_columns(
    c: Columns,
    idx: np.ndarray | None = None,
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    cache: _Cache | None = None,
) -> dict[str, dict[str, Any]]:
    """`metrics.per_scenario` on columns."""
    idx = _all(c) if idx is None else idx
    dur = duration_columns(c, idx)
    codes = c.a["scenario"][idx]
    present = np.unique(codes)
    names = sorted((c.tables["scenario"][int(k)], int(k)) for k in present)  # type: ignore[type-var]
    cache = cache or _Cache()
    return {
        str(name): compute_metrics_columns(
            c, idx if present.size == 1 else idx[codes == k], slo=slo, percentiles=percentiles, duration=dur,
            cache=cache,
        )  # fmt: skip
        for name, k in names
    }


def ttft_by_turn_columns(c: Columns, percentiles: Sequence[float] = (50, 99)) -> dict[str, Any]:
    """`metrics.ttft_by_turn` on columns."""
    ok = _ok(c, _all(c))
    turn = c.a["turn"][ok]
    ok = ok[turn != -1]
    turn = turn[turn != -1]
    out: dict[str, Any] = {}
    for t in np.unique(turn).tolist():
        rs = ok[turn == t]
        prompt = int(_pos(c.a["prompt_tokens"][rs]).sum())
        cached = int(_pos(c.a["cached_tokens"][rs]).sum())
        out[str(t)] = {
            "count": int(rs.size),
            "ttft_ms": M.stats_ms(c.first_chunk(rs) / 1e6, percentiles),
            "mean_prompt_tokens": prompt / rs.size,
            "cached_fraction": cached / prompt if prompt else None,
        }
    return out


def timeseries_columns(c: Columns, bucket_s: float = 1.0) -> dict[str, Any]:
    """`metrics.timeseries` on columns."""
    sent = _not_dropped(c, _all(c))
    if not sent.size:
        return {"t0": None, "bucket_s": bucket_s, "t": []}
    starts = c.a["t_start"][sent]
    ends = starts + c.a["end_us"][sent].astype(np.float64) / 1e6
    has = c.lens[sent] > 0
    ok = (c.a["error"][sent] == c.code("error", None)) & has
    out_tok = _pos(c.a["output_tokens"][sent]).astype(np.float64)
    ttft = np.zeros(sent.size)
    ttft[has] = c.first_chunk(sent[has])
    return M._timeseries(starts, ends, ok, out_tok, ttft / 1e6, bucket_s)


def build_metrics(
    c: Columns, *, slo: Slo | None = None, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any], int]:
    """What results.build_result needs: compute_metrics, per_scenario (non-dropped), ttft_by_turn, sent count."""
    cache = _Cache()
    res = compute_metrics_columns(c, slo=slo, percentiles=percentiles, cache=cache)
    sent = _not_dropped(c, _all(c))
    scen = per_scenario_columns(c, sent, slo=slo, percentiles=percentiles, cache=cache)
    return res, scen, ttft_by_turn_columns(c), int(sent.size)


def records_to_frames(lines: Iterable[str], jsonl_end: int) -> bytes:
    """A framed payload from JSON lines (the master's fallback for a batch that came without columns)."""
    recs, torn = parse_lines(io.StringIO("\n".join(lines)))
    return frame(pack_records(recs), jsonl_end, torn)
