"""A run's records at rest: the master's writer of records.parquet, and the one reader every reader goes through.

While the run goes on, the master appends each worker batch as one Arrow record batch to `records.arrows`, an
Arrow IPC stream (the spool): a batch is on disk a second after it came, and a master that dies mid-run leaves
every complete batch readable (pyarrow reads the stream up to a torn last message, which is skipped with a
warning). At the end of the run the spool becomes `records.parquet` (row groups of ROW_GROUP rows, zstd), which
is written under a temporary name, moved into place, and then the spool is removed. Each spool batch carries
`jsonl_end`, the size of records.jsonl just after its records, as columns.py's frames did: records.jsonl bytes
past the last batch's (a batch the columns lack) are read from the JSONL, so both always hold the same records.

`load_columns` reads, best first: records.parquet; a spool left by a master that died; records.cols (runs from
before records.parquet, the real-GPU corpus among them); records.jsonl alone (converted once into
records.parquet, best effort).
"""

from __future__ import annotations

import logging
import math
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vllm_users.measure.columns import EXTRA_INTS, EXTRA_STRINGS, STRINGS, Columns, jsonl_tail, load_vlc1
from vllm_users.measure.record import RequestRecord, read_records
from vllm_users.measure.records_arrow import SCHEMA, batch_from_records, columns_from_table
from vllm_users.run_dir import COLS, PARQUET, RECORDS, SPOOL

__all__ = [
    "ROW_GROUP",
    "RecordsWriter",
    "finalize",
    "load_columns",
    "read_request_records",
    "records_from_columns",
]

log = logging.getLogger("vllm_locust")

ROW_GROUP = 32_768  # rows per Parquet row group: ~32 MB of a run's buffers at 128 chunks a request
_SPOOL_ID = b"vllm_locust.spool"  # the spool's id, in its schema and in the Parquet file it went into
_SPOOLS = (
    b"vllm_locust.spools"  # the Parquet file's spool ids (a stale spool already in it is not added twice)
)
_JSONL_END = "jsonl_end"
_TORN = "torn"
# zstd, dictionaries for the strings only (a dictionary tried on every number costs the master ~4x the CPU, and
# the numbers compress as well without one); chunk times, which rise within a request, delta-encoded: ~40 % less
# CPU than zstd alone on them, for ~10 % more bytes
_WRITE: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": [*STRINGS, *EXTRA_STRINGS],
    "column_encoding": {"chunk_times_us.list.element": "DELTA_BINARY_PACKED"},
}


class RecordsWriter:
    """The master's records file: batches appended to the spool as they come, records.parquet at close."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        if os.path.exists(os.path.join(run_dir, SPOOL)):  # a master that died in this directory: its batches
            finalize(run_dir)
        self._fh: Any = open(os.path.join(run_dir, SPOOL), "wb", buffering=1 << 20)
        schema = SCHEMA.with_metadata({_SPOOL_ID: uuid.uuid4().hex.encode()})
        self._w: Any = pa.ipc.new_stream(self._fh, schema)

    def write(self, batch: pa.RecordBatch, jsonl_end: int, torn: int = 0) -> None:
        """Append one batch; `jsonl_end`: records.jsonl's size just after the same records (OSError: disk)."""
        self._w.write_batch(batch, custom_metadata={_JSONL_END: str(jsonl_end), _TORN: str(torn)})

    def flush(self) -> None:
        """Everything written so far onto the disk."""
        self._fh.flush()

    def abandon(self) -> None:
        """Stop writing (a write failed): the spool keeps what reached the disk, for the reader."""
        for close in (self._w.close, self._fh.close):
            try:
                close()
            except (OSError, pa.ArrowException):  # its buffer cannot be written either: the failure before
                pass

    def close(self) -> None:
        """End the spool and turn it into records.parquet."""
        self._w.close()
        self._fh.close()
        finalize(self.run_dir)


def _spool(path: str) -> Iterator[tuple[pa.RecordBatch | None, dict[bytes, bytes], bytes]]:
    """(batch, its metadata, the spool's id) of each complete batch; a torn last one: (None, {}, id) once."""
    with open(path, "rb") as fh:
        try:
            reader = pa.ipc.open_stream(fh)
        except (pa.ArrowInvalid, OSError):  # killed before the schema was written: no batch in it
            return
        sid = (reader.schema.metadata or {}).get(_SPOOL_ID, b"")
        while True:
            try:
                batch, meta = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                return
            except (pa.ArrowInvalid, OSError):
                yield None, {}, sid
                return
            yield batch, dict(meta or {}), sid


def _file_meta(f: pq.ParquetFile | None) -> dict[bytes, bytes]:
    """The key-value metadata of a Parquet file (where finalize leaves jsonl_end, torn and the spool ids)."""
    return dict((f.metadata.metadata or {}) if f is not None else {})


def finalize(run_dir: str) -> None:
    """The spool of `run_dir` into records.parquet (with the records a file already there holds), then gone."""
    spool, out = os.path.join(run_dir, SPOOL), os.path.join(run_dir, PARQUET)
    prior = pq.ParquetFile(out) if os.path.exists(out) else None
    spools = _file_meta(prior).get(_SPOOLS, b"").split()
    tmp = out + ".tmp"
    jsonl_end, torn, sid = 0, 0, b""
    with pq.ParquetWriter(tmp, SCHEMA, **_WRITE) as w:
        if prior is not None:
            for i in range(prior.num_row_groups):
                w.write_table(prior.read_row_group(i).cast(SCHEMA))
            meta = _file_meta(prior)
            jsonl_end, torn = int(meta.get(b"jsonl_end", 0)), int(meta.get(b"torn", 0))
        group: list[pa.RecordBatch] = []
        rows = 0
        for batch, bmeta, sid in _spool(spool):
            if sid in spools:  # moved into this file before a kill: its batches are there
                break
            if batch is None:
                log.warning(
                    "vllm-locust: %s: a torn last batch was skipped (a killed master, or a full disk?)", spool
                )
                continue
            jsonl_end = int(bmeta.get(b"jsonl_end", jsonl_end))
            torn += int(bmeta.get(b"torn", 0))
            group.append(batch)
            rows += batch.num_rows
            if rows >= ROW_GROUP:
                w.write_table(pa.Table.from_batches(group, SCHEMA))
                group, rows = [], 0
        if group:
            w.write_table(pa.Table.from_batches(group, SCHEMA))
        ids = b" ".join([*spools, sid] if sid and sid not in spools else spools)
        w.add_key_value_metadata({_SPOOLS: ids, b"jsonl_end": str(jsonl_end), b"torn": str(torn)})
    os.replace(tmp, out)
    os.unlink(spool)


def load_columns(run_dir: str, *, convert: bool = True) -> Columns:
    """The run's records as Columns: records.parquet, else a dead master's spool, else records.cols, else
    records.jsonl (with `convert`, then written as records.parquet for the next read), each completed by any
    records.jsonl tail it lacks. Torn batches and lines are skipped and counted."""
    parquet, spool = os.path.join(run_dir, PARQUET), os.path.join(run_dir, SPOOL)
    if (
        not os.path.exists(parquet)
        and not os.path.exists(spool)
        and os.path.exists(os.path.join(run_dir, COLS))
    ):
        return load_vlc1(run_dir)
    jsonl = os.path.join(run_dir, RECORDS)
    jsonl_size = os.path.getsize(jsonl) if os.path.exists(jsonl) else None
    tables: list[pa.Table] = []
    warnings: list[str] = []
    end, torn = 0, 0
    if os.path.exists(parquet):
        f = pq.ParquetFile(parquet)
        t = f.read()
        meta = _file_meta(f)
        end, torn = int(meta.get(b"jsonl_end", 0)), int(meta.get(b"torn", 0))
        tables.append(t.replace_schema_metadata(None))
    elif os.path.exists(spool):
        batches = []
        for batch, bmeta, _sid in _spool(spool):
            if batch is None:
                warnings.append(f"{SPOOL}: a torn last batch was skipped (a killed master, or a full disk?)")
                break
            b_end = int(bmeta.get(b"jsonl_end", 0))
            if jsonl_size is not None and b_end > jsonl_size:
                break  # the JSONL lost its buffered tail in a kill: its records from here on are not in both
            end, torn = b_end, torn + int(bmeta.get(b"torn", 0))
            batches.append(batch)
        tables.append(pa.Table.from_batches(batches, SCHEMA))
    only_jsonl = not tables
    if jsonl_size is not None and jsonl_size > end:
        tail, tail_torn = jsonl_tail(jsonl, end)
        torn += tail_torn
        tables.append(pa.Table.from_batches([batch_from_records(tail)], SCHEMA))
        if convert and only_jsonl:  # a run directory with records.jsonl alone: converted once
            _write_converted(run_dir, tables[-1], jsonl_size, tail_torn)
    table = pa.concat_tables(tables, promote_options="permissive") if tables else SCHEMA.empty_table()
    c = columns_from_table(table)
    c.torn_lines = torn
    c.warnings = warnings
    return c


def _write_converted(run_dir: str, table: pa.Table, jsonl_end: int, torn: int) -> None:
    """Cache a JSONL conversion as records.parquet (best effort: a read-only run directory is fine)."""
    path = os.path.join(run_dir, PARQUET)
    try:
        meta = {b"jsonl_end": str(jsonl_end), b"torn": str(torn)}
        pq.write_table(table.replace_schema_metadata(meta), path + ".tmp", **_WRITE)
        os.replace(path + ".tmp", path)
    except OSError as e:
        log.info("vllm-locust: could not write %s (%s); records not cached", path, e)


def records_from_columns(c: Columns) -> list[RequestRecord]:
    """Columns as RequestRecords (of `extra`, only the keys the columns keep: no_done, content_encoding,
    chunks_at_once and usage_tokens)."""
    a, n = c.a, c.n

    def opt(name: str) -> list[Any]:
        dt_none = {"t_intended": math.nan}.get(name, -1)
        vals = a[name].tolist()
        if name == "t_intended":
            return [None if math.isnan(v) else v for v in vals]
        return [None if v == dt_none else v for v in vals]

    def strs(name: str) -> list[str | None]:
        t = c.tables[name]
        return [t[i] for i in a[name].tolist()]

    cols: dict[str, list[Any]] = {}
    for name in ("t_start", "end_us", "seq", "user", "status", "tokens_estimated"):
        cols[name] = a[name].tolist()
    for name in (
        "t_intended prompt_tokens output_tokens cached_tokens input_len output_len session turn answer_us "
        "reasoning_tokens images image_tokens"
    ).split():
        cols[name] = opt(name)
    for (
        name
    ) in "scenario worker endpoint finish_reason error request_class model error_detail host replica".split():
        cols[name] = strs(name)
    for name in ("reasoning_estimated", "not_streamed"):
        cols[name] = [True if v else None for v in a[name].tolist()]
    cols["valid"] = [None if v == -1 else bool(v) for v in a["valid"].tolist()]
    no_done, encoding = a["no_done"].tolist(), strs("content_encoding")
    ints = {name: a[name].tolist() for name in EXTRA_INTS}
    chunks = c.chunks.tolist()
    starts, lens = c.starts.tolist(), c.lens.tolist()
    out = []
    for i in range(n):
        extra: dict[str, Any] = {}
        if no_done[i]:
            extra["no_done"] = True
        if encoding[i] is not None:
            extra["content_encoding"] = encoding[i]
        for name, vals in ints.items():
            if vals[i] >= 0:
                extra[name] = vals[i]
        out.append(
            RequestRecord(
                **{k: v[i] for k, v in cols.items()},
                chunk_times_us=chunks[starts[i] : starts[i] + lens[i]],
                extra=extra or None,
            )
        )
    return out


def read_request_records(path: str) -> tuple[list[RequestRecord], int]:
    """A run directory's records as RequestRecords (through load_columns), or a records.jsonl file's; and the
    torn lines skipped."""
    if not os.path.isdir(path):
        return read_records(path)
    c = load_columns(path)
    return records_from_columns(c), c.torn_lines
