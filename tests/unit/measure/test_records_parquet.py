"""records.parquet (vllm_users.measure.records_store): what the master writes is what records.jsonl holds, a
master that dies leaves its batches readable, and every reader goes through load_columns."""

from __future__ import annotations

import glob
import json
import os
import shutil
import tarfile
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.unit.measure.helpers import assert_reads_what_the_jsonl_kept, assert_same, rand_records
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.measure import columns as C
from vllm_users.measure.metrics import Slo
from vllm_users.measure.record import RequestRecord, read_records
from vllm_users.measure.records_store import (
    RecordsWriter,
    load_columns,
    read_request_records,
    records_from_columns,
)
from vllm_users.measure.result_builder import build_result
from vllm_users.run_dir import has_records

SLO = Slo({"ttft": 40.0, "tpot": 5.0, "e2el": 300.0})
META = {"model_id": "m", "date": "d"}
CORPUS = "/work/shared/gpu-corpus/h100-2026-12-07/loads_search_api1.tar.xz"


def _feed(col: Collector, records: list[RequestRecord], packed: bool = True) -> None:
    """Worker batches of 37 records, every other one without its columns (the master packs those)."""
    for i in range(0, len(records), 37):
        batch = records[i : i + 37]
        col.on_batch(
            {
                "worker": "w0",
                "records": "\n".join(r.to_json() for r in batch),
                "n": len(batch),
                "cols": C.pack_records(batch) if packed and i % 2 == 0 else None,
                "hists": {},
                "health": {},
                "final": False,
            }
        )


def _same_rows(df: pd.DataFrame, recs: list[RequestRecord]) -> None:
    """Every row of `df` is the record of records.jsonl at its place, field by field (None = null)."""
    assert len(df) == len(recs)
    rows = df.to_dict("records")
    for row, r in zip(rows, recs, strict=True):
        for name in ("scenario", "worker", "user", "seq", "endpoint", "t_start", "end_us", "status"):
            assert row[name] == getattr(r, name), name
        for name in ("t_intended", "prompt_tokens", "output_tokens", "input_len", "session", "turn"):
            v = getattr(r, name)
            assert pd.isna(row[name]) if v is None else row[name] == v, (name, row[name], v)
        for name in ("finish_reason", "error", "error_detail"):
            v = getattr(r, name)
            assert (row[name] is None or pd.isna(row[name])) if v is None else row[name] == v, name
        assert list(row["chunk_times_us"]) == r.chunk_times_us
        assert (row["valid"] is None or pd.isna(row["valid"])) if r.valid is None else row["valid"] == r.valid


def test_master_writes_one_parquet_that_pandas_reads_as_its_jsonl(tmp_path: Any) -> None:
    recs = rand_records(300, 9, open_loop=True, scenarios=("a", "b"))
    d = str(tmp_path)
    col = Collector(d)
    _feed(col, recs)
    assert os.path.exists(os.path.join(d, "records.arrows"))  # the spool while the run goes on
    col.close()
    assert sorted(os.listdir(d)) == ["records.jsonl", "records.parquet"]
    from_jsonl, torn = read_records(os.path.join(d, "records.jsonl"))
    assert torn == 0 and len(from_jsonl) == len(recs)
    _same_rows(pd.read_parquet(os.path.join(d, "records.parquet")), from_jsonl)
    c = load_columns(d)
    assert c.n == len(recs) and c.torn_lines == 0 and not c.warnings
    assert_same(build_result(from_jsonl, META, slo=SLO), build_result(c, META, slo=SLO))
    assert records_from_columns(c) == from_jsonl  # what trace export reads


def test_a_dead_master_leaves_its_batches_readable(tmp_path: Any) -> None:
    """Killed mid-run: the spool's complete batches read, a torn last batch is skipped with a warning and its
    records come from records.jsonl; a JSONL that lost its buffered tail decides where both end."""
    recs = rand_records(300, 5, scenarios=("a",))
    d = str(tmp_path)
    col = Collector(d)
    _feed(col, recs)
    col.flush()  # what a kill leaves: no close, no records.parquet
    assert not os.path.exists(os.path.join(d, "records.parquet"))
    ref = build_result(recs, META, slo=SLO)
    c = load_columns(d)
    assert c.n == len(recs) and not c.warnings
    assert_same(ref, build_result(c, META, slo=SLO))
    spool = os.path.join(d, "records.arrows")
    with open(spool, "r+b") as fh:
        fh.truncate(os.path.getsize(spool) - 100)
    c2 = load_columns(d)
    assert c2.n == len(recs) and c2.warnings  # the torn batch's records come from the JSONL
    assert_same(ref, build_result(c2, META, slo=SLO))
    assert_reads_what_the_jsonl_kept(d, recs, 200)


def test_a_new_master_in_the_same_directory_keeps_a_dead_ones_batches(tmp_path: Any) -> None:
    """A spool left by a dead master becomes records.parquet first; a spool already moved into
    records.parquet (killed between the two steps) is not added twice."""
    recs = rand_records(111, 6)
    d = str(tmp_path)
    col = Collector(d)
    _feed(col, recs[:74])
    col.flush()  # killed
    col2 = Collector(d)
    _feed(col2, recs[74:])
    col2.close()
    assert not os.path.exists(os.path.join(d, "records.arrows"))
    c = load_columns(d)
    assert c.n == 111
    assert_same(build_result(recs, META), build_result(c, META))
    # a kill after records.parquet was moved into place, before the spool was removed
    w = RecordsWriter(d)
    w.close()
    shutil.copy(os.path.join(d, "records.parquet"), str(tmp_path / "keep"))
    from vllm_users.measure.records_arrow import batch_from_records

    w = RecordsWriter(d)
    w.write(batch_from_records(recs[:5]), os.path.getsize(os.path.join(d, "records.jsonl")))
    w.flush()
    spool = os.path.join(d, "records.arrows")
    shutil.copy(spool, str(tmp_path / "spool"))
    w.close()
    shutil.copy(str(tmp_path / "spool"), spool)  # the spool back, as a kill would have left it
    assert pq.ParquetFile(os.path.join(d, "records.parquet")).metadata.num_rows == 116
    RecordsWriter(d).close()
    assert pq.ParquetFile(os.path.join(d, "records.parquet")).metadata.num_rows == 116


def test_trace_export_reads_the_parquet(tmp_path: Any) -> None:
    """`trace export` of a run directory without records.jsonl (its records in records.parquet) writes the
    trace it writes from the JSONL."""
    from orchestration.commands.trace import main

    recs = rand_records(150, 3, open_loop=True)
    d = str(tmp_path / "run")
    os.makedirs(d)
    col = Collector(d)
    _feed(col, recs)
    col.close()
    assert main(["export", os.path.join(d, "records.jsonl"), "-o", str(tmp_path / "a.jsonl")]) == 0
    os.unlink(os.path.join(d, "records.jsonl"))
    assert has_records(d)
    assert main(["export", d, "-o", str(tmp_path / "b.jsonl")]) == 0
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert read_request_records(d)[0] == recs


@pytest.mark.skipif(not os.path.exists(CORPUS), reason="the real-GPU corpus is not on this machine")
def test_the_gpu_corpus_records_cols_still_read(tmp_path: Any) -> None:
    """Run directories recorded on an H100 before records.parquet (records.cols, no records.jsonl): the one
    reader counts the requests their result.json counted."""
    with tarfile.open(CORPUS) as tar:
        members = [m for m in tar.getmembers() if "/server-0/" in m.name and m.isfile()]
        tar.extractall(tmp_path, members=members, filter="data")
    dirs = sorted(os.path.dirname(p) for p in glob.glob(str(tmp_path / "**/records.cols"), recursive=True))
    assert dirs
    for d in dirs:
        with open(os.path.join(d, "result.json")) as fh:
            written = json.load(fh)
        c = load_columns(d)
        assert c.n and c.torn_lines == 0 and not os.path.exists(os.path.join(d, "records.parquet"))
        sent = sum(1 for e in c.strings("error", range(c.n)) if e != "dropped")  # type: ignore[arg-type]
        assert written["completed"] + written["failed"] <= sent <= c.n, d


def test_a_run_against_the_simulator_writes_records_parquet(tmp_path: Any) -> None:
    """`vllm-locust run` (2 workers, open loop, SLOs) against the simulator: one records.parquet, which pandas
    reads with the rows of records.jsonl, and result.json (from it) equals build_result of records.jsonl."""
    from tests.integration.core.helpers import cli
    from vllm_sim.launch import start_simulator

    with start_simulator(["--fixed", "--ttft-ms", "10", "--itl-ms", "2"]) as sim:
        r = cli(
            [
                "--host",
                sim.url,
                "--request-rate",
                "60",
                "--num-prompts",
                "120",
                "--workers",
                "2",
                "--output-len",
                "12",
                "--ignore-eos",
                "--seed",
                "3",
                "--goodput",
                "ttft:50 e2el:200",
            ],
            str(tmp_path),
            timeout=150,
        )
    assert r.rc == 0, r.logs()[-3000:]
    files = os.listdir(r.run_dir)
    assert "records.parquet" in files and "records.arrows" not in files and "records.cols" not in files
    recs, torn = read_records(os.path.join(r.run_dir, "records.jsonl"))
    assert torn == 0 and len(recs) == 120
    _same_rows(pd.read_parquet(os.path.join(r.run_dir, "records.parquet")), recs)
    with open(os.path.join(r.run_dir, "run_meta.json")) as fh:
        meta = json.load(fh)
    ref = json.loads(json.dumps(build_result(recs, meta, slo=Slo.parse([meta["goodput"]])), default=str))
    for k in ref:
        if k not in ("meta", "date"):
            assert_same(ref[k], r.result[k], k)


def test_workers_do_not_load_pyarrow() -> None:
    """The plugin a worker loads, and the trace readers a --trace worker loads, leave pyarrow to the master."""
    import subprocess
    import sys

    code = (
        "import sys, vllm_users.distributed.plugin, vllm_users.workload.trace_formats; "
        "sys.exit(1 if 'pyarrow' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
