"""Records as Apache Arrow: the schema of records.parquet, and its conversions to and from `Columns`.

One row per request, one column per RequestRecord field, named as in records.jsonl, so that pandas, Polars and
DuckDB read the file as it is. A field that is None in the record is null here (numbers, strings, `valid`);
`chunk_times_us` is a list of int64 µs from the request's start. Of a record's `extra`, the keys the metrics
read are columns: `no_done` (bool), `content_encoding` (string), `chunks_at_once` and `usage_tokens` (int64,
null where absent); the rest stays in records.jsonl.
The bool flags `reasoning_estimated` and `not_streamed` are False where the record says None (as in Columns).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vllm_users.measure.columns import (
    EXTRA_INTS,
    EXTRA_STRINGS,
    FLAGS,
    NUMERIC,
    STRINGS,
    Columns,
    _merge,
    _unpack,
    pack_records,
)
from vllm_users.measure.record import RequestRecord

__all__ = ["SCHEMA", "batch_from_columns", "batch_from_payload", "batch_from_records", "columns_from_table"]

# numeric fields a record may leave None (null in the file); the others always hold a value
_NULLABLE = frozenset(NUMERIC) - {"t_start", "end_us", "seq", "user", "status"}
_BOOLS = ("tokens_estimated", *FLAGS, "no_done")
_ARROW = {"<f8": pa.float64(), "<i8": pa.int64(), "<i4": pa.int32()}


def _schema() -> pa.Schema:
    """RequestRecord's field order, then the `extra` keys the metrics read."""
    order = (
        "scenario worker user seq endpoint t_start t_intended chunk_times_us end_us prompt_tokens output_tokens "
        "cached_tokens tokens_estimated finish_reason status error error_detail input_len output_len turn "
        "session valid answer_us reasoning_tokens reasoning_estimated not_streamed request_class model images "
        "image_tokens host replica no_done content_encoding chunks_at_once usage_tokens"
    ).split()
    types: dict[str, pa.DataType] = {n: _ARROW[dt.str] for n, (dt, _none) in NUMERIC.items()}
    types.update({n: pa.bool_() for n in (*_BOOLS, "valid")})
    types.update({n: pa.string() for n in (*STRINGS, *EXTRA_STRINGS)})
    types.update({n: pa.int64() for n in EXTRA_INTS})
    types["chunk_times_us"] = pa.list_(pa.int64())
    assert set(order) == set(types), "every column has its place"
    return pa.schema(
        [
            pa.field(
                n,
                types[n],
                nullable=n in _NULLABLE or n in EXTRA_INTS or types[n] == pa.string() or n == "valid",
            )
            for n in order
        ]
    )


SCHEMA = _schema()
_NAMES = SCHEMA.names


def batch_from_columns(c: Columns) -> pa.RecordBatch:
    """`c` as one Arrow record batch of SCHEMA (sentinels become nulls)."""
    cols: dict[str, pa.Array] = {}
    for name, (_dt, none) in NUMERIC.items():
        a = c.a[name]
        mask = None
        if name in _NULLABLE:
            mask = np.isnan(a) if a.dtype.kind == "f" else a == none
            mask = mask if mask.any() else None
        cols[name] = pa.array(a, mask=mask)
    for name in _BOOLS:
        cols[name] = pa.array(c.a[name])
    valid = c.a["valid"]
    cols["valid"] = pa.array(valid == 1, mask=valid == -1)
    for name in EXTRA_INTS:
        x = c.a[name]
        cols[name] = pa.array(x, mask=x == -1)
    for name in (*STRINGS, *EXTRA_STRINGS):
        table = c.tables[name]
        if len(table) == 1:  # one value in the batch (None for most of these columns): no gather
            cols[name] = pa.nulls(c.n, pa.string()) if table[0] is None else pa.repeat(table[0], c.n)
        else:
            cols[name] = pa.array(table, pa.string()).take(pa.array(c.a[name]))
    offsets = np.zeros(c.n + 1, np.int32)
    np.cumsum(c.lens, out=offsets[1:])
    cols["chunk_times_us"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(c.chunks.astype(np.int64)))
    return pa.RecordBatch.from_arrays([cols[n] for n in _NAMES], schema=SCHEMA)


def batch_from_payload(payload: bytes) -> pa.RecordBatch:
    """A worker's packed batch (columns.pack_records) as an Arrow record batch."""
    return batch_from_columns(_merge([_unpack(memoryview(payload))]))


def batch_from_records(recs: list[RequestRecord]) -> pa.RecordBatch:
    """In-memory records as an Arrow record batch."""
    return batch_from_payload(pack_records(recs))


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """An Arrow bitmap (values of a bool array, or validity) as numpy bools."""
    return np.unpackbits(np.frombuffer(buf, np.uint8), bitorder="little")[offset : offset + n].astype(
        np.bool_
    )


def _numpy(col: pa.ChunkedArray | pa.Array, fill: Any, dtype: np.dtype) -> np.ndarray:
    """A primitive column as numpy, nulls as `fill`, read from its buffers: pyarrow's to_numpy and fill_null
    import pandas (~0.3 s of every report's start)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    out = _view(arr).astype(dtype)
    if arr.null_count:
        out[~_bits(arr.buffers()[0], arr.offset, len(arr))] = fill
    return out


def _view(arr: pa.Array) -> np.ndarray:
    """The values of a primitive array (nulls: whatever its buffer holds there), without a copy but for bools."""
    n, buf = len(arr), arr.buffers()[1]
    if buf is None:  # an empty array
        return np.zeros(n, np.int8)
    if pa.types.is_boolean(arr.type):
        return _bits(buf, arr.offset, n)
    width = arr.type.bit_width // 8
    raw = np.frombuffer(buf, np.dtype(f"<{'f' if pa.types.is_floating(arr.type) else 'i'}{width}"))
    return raw[arr.offset : arr.offset + n]


def columns_from_table(t: pa.Table) -> Columns:
    """A records table (records.parquet, or the spool) as Columns; a column the table lacks reads as None."""
    n = t.num_rows
    arrays: dict[str, np.ndarray] = {}
    tables: dict[str, list[str | None]] = {}
    names = set(t.column_names)
    for name, (dt, none) in NUMERIC.items():
        if name in names:
            arrays[name] = _numpy(t.column(name), none, dt)
    for name in _BOOLS:
        if name in names:
            arrays[name] = _numpy(t.column(name), False, np.dtype(np.bool_))
    valid = t.column("valid").combine_chunks()
    arrays["valid"] = np.where(
        _numpy(valid.is_null(), False, np.dtype(np.bool_)), -1, _numpy(valid, False, np.dtype(np.int8))
    ).astype(np.int8)
    for name in EXTRA_INTS:  # files written before these columns: none (the merge fills -1)
        if name in names:
            arrays[name] = _numpy(t.column(name), -1, np.dtype(np.int64))
    for name in (*STRINGS, *EXTRA_STRINGS):
        if name not in names:
            continue
        enc = pc.dictionary_encode(t.column(name).combine_chunks(), null_encoding="encode")
        arrays[name] = _numpy(enc.indices, 0, np.dtype(np.int32))
        tables[name] = enc.dictionary.to_pylist()
    chunks = t.column("chunk_times_us").combine_chunks()
    lens = _numpy(pc.list_value_length(chunks), 0, np.dtype(np.int32))
    flat = _view(chunks.flatten())  # never null: one copy below, into int32 where the values fit
    fits = not flat.size or (-(1 << 31) <= int(flat.min()) and int(flat.max()) < (1 << 31))
    flat = flat.astype(np.int32 if fits else np.int64)  # as pack_records keeps them
    arrays["chunk_lens"], arrays["chunks"] = lens, flat
    return _merge([(n, arrays, tables)])
