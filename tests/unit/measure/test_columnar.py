"""The columnar file format (vllm_users.measure.columns): what the workers pack and the master frames is what
records.jsonl holds, and results computed from either agree field by field."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from tests.unit.measure.helpers import assert_same, rand_records
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.measure import columns as C
from vllm_users.measure.metrics import Slo
from vllm_users.measure.record import RequestRecord, read_records
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


def _collector_run(tmp: str, records: list[RequestRecord], packed: bool = True) -> Collector:
    col = Collector(tmp)
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
    col.close()
    return col


def test_collector_files_agree_and_torn_frames(tmp_path: Any) -> None:
    recs = rand_records(300, 9, open_loop=True, scenarios=("a", "b"))
    d = str(tmp_path)
    _collector_run(d, recs)
    from_jsonl, torn = read_records(os.path.join(d, "records.jsonl"))
    assert torn == 0 and len(from_jsonl) == len(recs)
    c = C.load_columns(d)
    assert c.n == len(recs) and c.torn_lines == 0
    meta = {"model_id": "m", "date": "d"}
    ref = build_result(from_jsonl, meta, slo=SLO)
    assert_same(ref, build_result(c, meta, slo=SLO))
    # a killed master: torn last frame and torn last JSONL line
    cols = os.path.join(d, "records.cols")
    with open(cols, "r+b") as fh:
        fh.truncate(os.path.getsize(cols) - 100)
    with open(os.path.join(d, "records.jsonl"), "a") as fh:
        fh.write('{"scenario":"a","wor')
    c2 = C.load_columns(d)
    assert (
        c2.n == len(recs) and c2.torn_lines == 1 and c2.warnings
    )  # the torn frame's records come from JSONL
    assert_same(ref, build_result(c2, meta, slo=SLO))
    res = write_result(d, meta)
    assert any("torn" in w for w in res["warnings"])
    # the JSONL lost its buffered tail but the columns have it: the columns follow the JSONL
    recs_j, _ = read_records(os.path.join(d, "records.jsonl"))
    with open(os.path.join(d, "records.jsonl"), "r+b") as fh:
        fh.truncate(sum(len(r.to_json()) + 1 for r in recs[:200]))
    c3 = C.load_columns(d)
    assert c3.n == 200
    assert_same(build_result(recs[:200], meta), build_result(c3, meta))


def test_old_run_dir_is_converted_once(tmp_path: Any) -> None:
    recs = rand_records(120, 4)
    d = str(tmp_path)
    with open(os.path.join(d, "records.jsonl"), "w") as fh:
        fh.write("".join(r.to_json() + "\n" for r in recs) + "{torn")
    c = C.load_columns(d)
    assert os.path.exists(os.path.join(d, "records.cols"))
    assert c.n == 120 and c.torn_lines == 1
    c2 = C.load_columns(d)
    assert c2.n == 120 and c2.torn_lines == 1
    meta = {"model_id": "m", "date": "d"}
    assert_same(build_result(recs, meta), build_result(c2, meta))
    with open(os.path.join(d, "records.jsonl"), "a") as fh:  # appended later: read as a tail
        fh.write("\n" + recs[0].to_json() + "\n")
    assert C.load_columns(d).n == 121


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
    c = C.load_columns(d)
    assert torn == 0 and c.n == len(recs) == 2500 and c.torn_lines == 0
    meta = {"model_id": "m", "date": "d"}
    assert_same(build_result(recs, meta), build_result(c, meta))
    assert C._read_frames(os.path.join(d, "records.cols"))[0][-1][0] == os.path.getsize(
        os.path.join(d, "records.jsonl")
    )


def test_end_to_end_run_result_equals_jsonl_recomputation(tmp_path: Any) -> None:
    """`vllm-locust run` (2 workers, open loop, SLOs) against the simulator: result.json (from records.cols)
    equals build_result recomputed from records.jsonl."""
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
    assert os.path.getsize(os.path.join(r.run_dir, "records.cols")) > 0
    written = r.result
    recs, torn = read_records(os.path.join(r.run_dir, "records.jsonl"))
    assert torn == 0 and len(recs) == 120
    with open(os.path.join(r.run_dir, "run_meta.json")) as fh:
        meta = json.load(fh)
    ref = json.loads(json.dumps(build_result(recs, meta, slo=Slo.parse([meta["goodput"]])), default=str))
    for k in ref:
        if k not in ("meta", "date"):
            assert_same(ref[k], written[k], k)
