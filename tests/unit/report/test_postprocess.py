"""Post-processor: records -> result (same numbers as vllm_users.measure.result_builder), fallbacks, bad input."""

from __future__ import annotations

import json
import os

import pytest

from orchestration.report.postprocess import ReportError, load_run
from tests.unit.report.helpers import LOCUST_STATS, make_records, server_samples, write_run
from vllm_users.measure.result_builder import build_result


def test_records_recomputed_with_build_result(tmp_path) -> None:  # type: ignore[no-untyped-def]
    recs = make_records(100)
    d = write_run(str(tmp_path / "r"), recs, extra={"client_health": {"client_bound": False}})
    run = load_run(d)
    ref = build_result(recs, json.load(open(os.path.join(d, "run_meta.json"))))
    assert run.source == "records"
    for k in ("completed", "median_ttft_ms", "p99_itl_ms", "mean_tpot_ms", "output_throughput"):
        assert run.result[k] == ref[k]
    assert run.result["client_health"] == {"client_bound": False}  # kept from the master's result.json
    assert run.arrays["itl"].size == 100 * 15
    assert sum(run.timeseries["completed_per_s"]) == pytest.approx(100)  # type: ignore[index]


def test_server_metrics_merged(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = write_run(str(tmp_path / "r"), make_records(50), samples=server_samples())
    sm = load_run(d).result["server_metrics"]
    assert sm["prefix_cache_hit_rate"] == pytest.approx(0.8)
    assert "vs_client" in sm


def test_torn_last_record_is_skipped_with_warning(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = write_run(str(tmp_path / "r"), make_records(20))
    with open(os.path.join(d, "records.jsonl"), "a") as fh:
        fh.write('{"scenario":"chat","worker":"w0","us')
    run = load_run(d)
    assert run.result["completed"] == 20
    assert any("torn" in w for w in run.warnings)


def test_missing_dir_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ReportError, match="does not exist"):
        load_run(str(tmp_path / "nope"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ReportError, match="no records.jsonl, result.json or locust_stats.csv"):
        load_run(str(tmp_path / "empty"))


def test_empty_run_falls_back_to_result_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = write_run(str(tmp_path / "r"), [])
    run = load_run(d)
    assert run.source == "result.json"
    assert run.result["completed"] == 0
    assert any("empty run" in w for w in run.warnings)


def test_csv_only_run_lists_approximate_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "plain"
    d.mkdir()
    (d / "locust_stats.csv").write_text(LOCUST_STATS + "POST,/v1/x,5,0,1")  # torn last line
    run = load_run(str(d))
    assert run.source == "locust_csv"
    assert run.result["completed"] == 98 and run.result["failed"] == 2
    assert run.result["median_e2el_ms"] == 110 and run.result["p99_e2el_ms"] == 400
    assert run.result["mean_e2el_ms"] == pytest.approx(123.4)
    assert "p99_e2el_ms" in run.approximate and "median_e2el_ms" in run.approximate
    assert any("torn" in w for w in run.warnings)
    assert any("time-to-headers" in w for w in run.warnings)


def test_corrupt_result_json_with_records_still_reports(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = write_run(str(tmp_path / "r"), make_records(10))
    with open(os.path.join(d, "result.json"), "w") as fh:
        fh.write('{"completed": 1')
    run = load_run(d)
    assert run.result["completed"] == 10
    assert any("result.json unreadable" in w for w in run.warnings)
