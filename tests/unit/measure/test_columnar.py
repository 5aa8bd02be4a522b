"""The columns (vllm_users.measure.columns): what the workers pack is what records.jsonl holds, records.cols of
older runs still reads, and results computed from either agree field by field."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tests.unit.measure.helpers import assert_reads_what_the_jsonl_kept, assert_same, rand_records
from vllm_users.measure import columns as C
from vllm_users.measure.metrics import Slo
from vllm_users.measure.record import RequestRecord, read_records
from vllm_users.measure.records_store import load_columns
from vllm_users.measure.result_builder import build_result, write_result

SLO = Slo({"ttft": 40.0, "tpot": 5.0, "e2el": 300.0})


def test_columns_hold_every_record_field() -> None:
    """columns_from_records against the records themselves, field by field (None -> the column's sentinel)."""
    recs = rand_records(300, 2, open_loop=True, scenarios=("a", "b"))
    c = C.columns_from_records(recs)
    assert c.n == len(recs)
    for name, (_dt, none) in C.NUMERIC.items():
        want = [none if getattr(r, name) is None else getattr(r, name) for r in recs]
        got = c.a[name].tolist()
        assert [None if isinstance(x, float) and math.isnan(x) else x for x in got] == [
            None if isinstance(x, float) and math.isnan(x) else x for x in want
        ], name
    rows = np.arange(c.n)
    for name in C.STRINGS:
        assert c.strings(name, rows) == [getattr(r, name) for r in recs], name
    assert c.a["valid"].tolist() == [-1 if r.valid is None else int(r.valid) for r in recs]
    assert c.a["tokens_estimated"].tolist() == [r.tokens_estimated for r in recs]
    assert [c.chunks[s : s + n].tolist() for s, n in zip(c.starts, c.lens, strict=True)] == [
        r.chunk_times_us for r in recs
    ]
    assert C.columns_from_records([]).n == 0
    assert C.as_columns(c) is c and C.as_columns(recs).n == c.n


def test_frames_without_a_newer_column_read_it_as_none() -> None:
    """A records.cols written before a column existed (here: session) loads with that column as None."""
    recs = rand_records(20, 4)
    n, arrays, tables = C._unpack(memoryview(C.pack_records(recs)))
    del arrays["session"]
    c = C._merge([(n, arrays, tables), C._unpack(memoryview(C.pack_records(recs)))])
    assert c.a["session"][:n].tolist() == [-1] * n
    assert c.a["session"][n:].tolist() == [-1 if r.session is None else r.session for r in recs]


def _legacy_run(tmp: str, records: list[RequestRecord]) -> None:
    """A run directory as the master wrote it before records.parquet: records.jsonl and records.cols."""
    end = 0
    with (
        open(os.path.join(tmp, "records.jsonl"), "w") as fh,
        open(os.path.join(tmp, "records.cols"), "wb") as cfh,
    ):
        for i in range(0, len(records), 37):
            batch = records[i : i + 37]
            text = "\n".join(r.to_json() for r in batch) + "\n"
            fh.write(text)
            end += len(text.encode())
            cfh.write(C.frame(C.pack_records(batch), end))


def test_older_run_dirs_records_cols_and_torn_frames(tmp_path: Any) -> None:
    """records.cols of older runs reads through the one reader (records_store.load_columns), torn frames too."""
    recs = rand_records(300, 9, open_loop=True, scenarios=("a", "b"))
    d = str(tmp_path)
    _legacy_run(d, recs)
    from_jsonl, torn = read_records(os.path.join(d, "records.jsonl"))
    assert torn == 0 and len(from_jsonl) == len(recs)
    c = load_columns(d)
    assert c.n == len(recs) and c.torn_lines == 0
    assert not os.path.exists(os.path.join(d, "records.parquet"))  # an older run directory is left as it is
    meta = {"model_id": "m", "date": "d"}
    ref = build_result(from_jsonl, meta, slo=SLO)
    assert_same(ref, build_result(c, meta, slo=SLO))
    # a killed master: torn last frame and torn last JSONL line
    cols = os.path.join(d, "records.cols")
    with open(cols, "r+b") as fh:
        fh.truncate(os.path.getsize(cols) - 100)
    with open(os.path.join(d, "records.jsonl"), "a") as fh:
        fh.write('{"scenario":"a","wor')
    c2 = load_columns(d)
    assert (
        c2.n == len(recs) and c2.torn_lines == 1 and c2.warnings
    )  # the torn frame's records come from JSONL
    assert_same(ref, build_result(c2, meta, slo=SLO))
    res = write_result(d, meta)
    assert any("torn" in w for w in res["warnings"])
    # the JSONL lost its buffered tail but the columns have it: the columns follow the JSONL
    assert_reads_what_the_jsonl_kept(d, recs, 200)


def test_old_run_dir_is_converted_once(tmp_path: Any) -> None:
    """A run directory with records.jsonl alone is read once and cached as records.parquet."""
    recs = rand_records(120, 4)
    d = str(tmp_path)
    with open(os.path.join(d, "records.jsonl"), "w") as fh:
        fh.write("".join(r.to_json() + "\n" for r in recs) + "{torn")
    c = load_columns(d)
    assert os.path.exists(os.path.join(d, "records.parquet"))
    assert c.n == 120 and c.torn_lines == 1
    c2 = load_columns(d)
    assert c2.n == 120 and c2.torn_lines == 1
    meta = {"model_id": "m", "date": "d"}
    assert_same(build_result(recs, meta), build_result(c2, meta))
    with open(os.path.join(d, "records.jsonl"), "a") as fh:  # appended later: read as a tail
        fh.write("\n" + recs[0].to_json() + "\n")
    assert load_columns(d).n == 121


def test_worker_pack_cost_per_record() -> None:
    import time

    recs = rand_records(2000, 1)
    t = time.perf_counter()
    for _ in range(5):
        C.pack_records(recs)
    per_record_us = (time.perf_counter() - t) / 5 / len(recs) * 1e6
    assert per_record_us < 50, per_record_us  # a few µs on a quiet machine; generous for noisy CI
    print(json.dumps({"pack_us_per_record": per_record_us}))


def test_benchmark_columns_match_its_jsonl(tmp_path: Any) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_pp", os.path.join(os.path.dirname(__file__), "../../../benchmarks/bench_postprocess.py")
    )
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    d = bench.make_run_dir(str(tmp_path / "run"), 2500, 5)
    recs, torn = read_records(os.path.join(d, "records.jsonl"))
    c = load_columns(d)
    assert torn == 0 and c.n == len(recs) == 2500 and c.torn_lines == 0
    meta = {"model_id": "m", "date": "d"}
    assert_same(build_result(recs, meta), build_result(c, meta))
    ends = pq.ParquetFile(os.path.join(d, "records.parquet")).metadata.metadata[b"jsonl_end"]
    assert int(ends) == os.path.getsize(os.path.join(d, "records.jsonl"))
