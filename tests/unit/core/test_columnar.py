"""Columnar fast path (vllm_users.columns) against the object path (vllm_users.metrics), field by field."""

from __future__ import annotations

import json
import math
import os
import random
from typing import Any

import numpy as np
import pytest

from vllm_users import columns as C
from vllm_users import metrics as M
from vllm_users.master_side import Collector
from vllm_users.record import ERROR_KINDS, RequestRecord, read_records
from vllm_users.results import build_result, write_result


def _rand_records(
    n: int, seed: int, *, open_loop: bool = False, scenarios: tuple[str, ...] = ("chat",)
) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    t = 1_700_000_000.0
    for i in range(n):
        t += rng.expovariate(50.0)
        kind = rng.random()
        err: str | None = None
        if kind < 0.08:
            err = rng.choice([k for k in ERROR_KINDS if k != "dropped"])
        elif open_loop and kind < 0.12:
            err = "dropped"
        nch = 0 if err in ("http", "connection", "dropped") else rng.choice([1, 1, 2, 3, 17, 64])
        c0 = rng.randint(100, 80_000)
        chunks = [c0]
        for _ in range(nch - 1):
            chunks.append(chunks[-1] + rng.randint(0, 30_000))
        chunks = chunks[:nch]
        none_tokens = rng.random() < 0.1
        out.append(RequestRecord(
            scenario=rng.choice(scenarios) if err != "dropped" else "-", worker=f"w{i % 3}", user=i % 7, seq=i,
            endpoint="chat" if err != "dropped" else "-", t_start=t,
            t_intended=(t - rng.random() * 0.05) if open_loop else None, chunk_times_us=chunks,
            end_us=(chunks[-1] + rng.randint(0, 2000)) if chunks else (0 if err == "dropped" else rng.randint(1, 9000)),
            prompt_tokens=None if none_tokens else rng.randint(1, 500),
            output_tokens=None if none_tokens else max(0, nch + rng.randint(-1, 3)),
            cached_tokens=rng.choice([None, 0, rng.randint(0, 100)]), tokens_estimated=rng.random() < 0.1,
            finish_reason=rng.choice([None, "stop", "length"]), status=500 if err == "http" else 200, error=err,
            error_detail="x" if err else None, input_len=rng.choice([None, 128]), output_len=rng.choice([None, 64]),
            turn=rng.choice([None, 0, 1, 2]), valid=rng.choice([None, True, False]),
        ))  # fmt: skip
    return out


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """Equal field by field; floats to rel 1e-12 (NaN == NaN); dict key order included."""
    if isinstance(a, dict):
        assert isinstance(b, dict), path
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert isinstance(b, float | int), f"{path}: {a!r} vs {b!r}"
        if math.isnan(a):
            assert math.isnan(b), path
        else:
            assert b == pytest.approx(a, rel=1e-12, abs=1e-12), f"{path}: {a!r} vs {b!r}"
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} vs {b!r}"


def _check(records: list[RequestRecord], slo: M.Slo | None = None) -> None:
    c = C.columns_from_records(records)
    assert_same(M.compute_metrics(records, slo=slo), C.compute_metrics_columns(c, slo=slo))
    nd = [r for r in records if r.error != "dropped"]
    assert_same(M.per_scenario(nd, slo=slo), C.per_scenario_columns(c, C._not_dropped(c, C._all(c)), slo=slo))
    assert_same(M.ttft_by_turn(records), C.ttft_by_turn_columns(c))
    assert_same(M.timeseries(records), C.timeseries_columns(c))
    ref, new = M.metric_arrays(records), C.metric_arrays_columns(c)
    for k in ref:
        assert np.array_equal(ref[k], new[k]), k
    meta = {"model_id": "m", "date": "20240101-000000"}
    assert_same(build_result(records, meta, slo=slo), build_result(c, meta, slo=slo))


SLO = M.Slo({"ttft": 40.0, "tpot": 5.0, "e2el": 300.0})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_closed_loop(seed: int) -> None:
    _check(_rand_records(400, seed), SLO)


def test_open_loop_multi_scenario_with_dropped() -> None:
    _check(_rand_records(500, 7, open_loop=True, scenarios=("chat", "json", "tools")), SLO)


def test_single_scenario_per_scenario_reuses_overall() -> None:
    _check(_rand_records(300, 3, open_loop=True), None)


def test_edge_cases() -> None:
    base = dict(worker="w", user=0, seq=0, endpoint="chat")
    only_fail = [RequestRecord(scenario="a", t_start=1.0, error="http", status=503, end_us=10, **base)]  # type: ignore[arg-type]
    _check(only_fail, SLO)
    single = [
        RequestRecord(scenario="a", t_start=1.0, chunk_times_us=[5000], end_us=6000, output_tokens=1, **base)
    ]  # type: ignore[arg-type]
    _check(single, SLO)
    interrupted = [
        RequestRecord(scenario="a", t_start=1.0, chunk_times_us=[5, 9], error="interrupted", **base)
    ]  # type: ignore[arg-type]
    _check(interrupted + single, None)
    dropped = [RequestRecord(scenario="-", t_start=1.0, t_intended=1.0, error="dropped", **base)]  # type: ignore[arg-type]
    _check(dropped, SLO)
    _check(dropped + single, SLO)
    _check([], None)


def test_itl_counts_path_equals_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _rand_records(600, 11)
    ref = M.compute_metrics(recs, percentiles=(50, 90, 95, 99, 99.9))
    monkeypatch.setattr(C, "ITL_COUNT_THRESHOLD", 0)
    new = C.compute_metrics_columns(C.columns_from_records(recs), percentiles=(50, 90, 95, 99, 99.9))
    assert_same({k: v for k, v in ref.items() if "itl" in k}, {k: v for k, v in new.items() if "itl" in k})
    for n in (1, 2, 3, 4):  # tiny pools: median/percentile index arithmetic
        one = [
            RequestRecord("a", "w", 0, 0, "chat", 1.0, chunk_times_us=list(range(0, 100 * (n + 1), 100 + n)))
        ]
        ref1 = M.compute_metrics(one)
        new1 = C.compute_metrics_columns(C.columns_from_records(one))
        assert_same(
            {k: v for k, v in ref1.items() if "itl" in k}, {k: v for k, v in new1.items() if "itl" in k}
        )


def test_plot_arrays_itl_is_cdf_sample() -> None:
    recs = _rand_records(400, 5)
    c = C.columns_from_records(recs)
    full = C.metric_arrays_columns(c)["itl"]
    sample = C.plot_arrays(c, max_sample=500, seed=0)["itl"]
    pick = np.random.default_rng(0).integers(0, full.size, 500)
    assert np.array_equal(sample, full[pick])


def _collector_run(tmp: str, records: list[RequestRecord], packed: bool = True) -> Collector:
    col = Collector(tmp)
    for i in range(0, len(records), 37):
        batch = records[i : i + 37]
        col.on_batch({
            "worker": "w0", "records": "\n".join(r.to_json() for r in batch), "n": len(batch),
            "cols": C.pack_records(batch) if packed and i % 2 == 0 else None, "hists": {}, "health": {}, "final": False,
        })  # fmt: skip
    col.close()
    return col


def test_collector_files_agree_and_torn_frames(tmp_path: Any) -> None:
    recs = _rand_records(300, 9, open_loop=True, scenarios=("a", "b"))
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
    recs = _rand_records(120, 4)
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

    recs = _rand_records(2000, 1)
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


@pytest.mark.parametrize("block", [1, 7, 1000])
def test_itl_counts_blocks(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    recs = [r for r in _rand_records(300, 12) if r.error is None and r.chunk_times_us]
    c = C.columns_from_records(recs)
    ok = C._ok(c, C._all(c))
    flat, lens = C._ok_flat(c, ok)
    ref = M.stats_ms(M.metric_arrays(recs)["itl"], (50, 90, 99.9))
    monkeypatch.setattr(C, "ITL_COUNT_THRESHOLD", 0)
    assert_same(ref, C._itl_stats(flat, lens, (50, 90, 99.9), block=block))


def test_end_to_end_run_result_equals_jsonl_recomputation(tmp_path: Any) -> None:
    """`vllm-locust run` (2 workers, open loop, SLOs) against the simulator: result.json (from records.cols)
    equals build_result recomputed from records.jsonl."""
    from orchestration.sim.launch import start_simulator
    from tests.integration.core.helpers import cli

    with start_simulator(["--fixed", "--ttft-ms", "10", "--itl-ms", "2"]) as sim:
        r = cli(["--host", sim.url, "--request-rate", "60", "--num-prompts", "120", "--workers", "2",
                 "--output-len", "12", "--ignore-eos", "--seed", "3", "--goodput", "ttft:50 e2el:200"],
                str(tmp_path), timeout=150)  # fmt: skip
    assert r.rc == 0, r.logs()[-3000:]
    assert os.path.getsize(os.path.join(r.run_dir, "records.cols")) > 0
    written = r.result
    recs, torn = read_records(os.path.join(r.run_dir, "records.jsonl"))
    assert torn == 0 and len(recs) == 120
    with open(os.path.join(r.run_dir, "run_meta.json")) as fh:
        meta = json.load(fh)
    ref = json.loads(json.dumps(build_result(recs, meta, slo=M.Slo.parse([meta["goodput"]])), default=str))
    for k in ref:
        if k not in ("meta", "date"):
            assert_same(ref[k], written[k], k)
