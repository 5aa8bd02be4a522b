"""--repeats: a repeat that measured nothing (its warm-up took every request, or it wrote no result) is left out
of the means and named; n counts the repeats that measured something, and the report reads only those."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orchestration.capacity.repeats import format_repeats, nothing_measured, run_repeats
from orchestration.report.run_sets import load_repeats
from tests.unit.report.helpers import make_records, write_run
from vllm_users import run_dir
from vllm_users.measure.run_result import load_result
from vllm_users.options import Options, build


def _run_one(empty: set[int], missing: set[int] = frozenset()) -> Any:  # type: ignore[assignment]
    """Repeat k (from 1) writes 40 requests; in `empty` its --warmup 500r takes all 40; in `missing` no result."""
    count = [0]

    def run_one(b: Options, watch: Any = None) -> int:
        count[0] += 1
        if count[0] in missing:
            return 6
        meta = {"warmup": "500r"} if count[0] in empty else {}
        write_run(
            os.path.join(b.outputs.output_dir, b.outputs.run_name),
            make_records(40, ttft_ms=20.0 + count[0], seed=count[0]),
            meta=meta,
        )
        return 9 if count[0] in empty else 0

    return run_one


def _options(tmp: str, n: int) -> Options:
    return build(host="http://127.0.0.1:9", output_dir=tmp, run_name="rep", no_report=True, repeats=n)


def test_a_repeat_that_measured_nothing_is_left_out_and_named(tmp_path: str, capsys: Any) -> None:
    code = run_repeats(_options(str(tmp_path), 3), _run_one(empty={2}))
    assert code == 9  # the run of repeats did not give what was asked: said by the exit code too
    base = os.path.join(str(tmp_path), "rep")
    doc = run_dir.read_json(base, run_dir.REPEATS)
    assert doc["runs"] == ["repeat-01", "repeat-03"]
    assert [x["run"] for x in doc["left_out"]] == ["repeat-02"]
    assert "--warmup 500r took 40" in doc["left_out"][0]["reason"]
    m = doc["metrics"]["request_throughput"]
    assert m["n"] == 2
    loaded = [load_result(os.path.join(base, d)) for d in ("repeat-01", "repeat-03")]
    want = [r.metric("request_throughput") for r in loaded if r is not None]
    assert m["values"] == pytest.approx(want) and m["mean"] == pytest.approx(sum(want) / 2)
    assert doc["metrics"]["median_ttft_ms"]["n"] == 2
    out = capsys.readouterr().out
    assert "vllm-locust: repeat 2 measured nothing: no request completed in the measured window" in out
    assert "Over 2 of 3 repeats" in out and "(n=3)" not in out and "Left out: repeat-02" in out
    # the report reads the same repeats: its means are over the two that measured something
    data = load_repeats(base)
    assert data.result["repeats"]["n"] == 2
    assert data.result["request_throughput"] == pytest.approx(m["mean"])


def test_a_repeat_without_a_result_is_left_out_too(tmp_path: str, capsys: Any) -> None:
    run_repeats(_options(str(tmp_path), 3), _run_one(empty=set(), missing={1}))
    doc = run_dir.read_json(os.path.join(str(tmp_path), "rep"), run_dir.REPEATS)
    assert doc["runs"] == ["repeat-02", "repeat-03"]
    assert doc["left_out"] == [{"run": "repeat-01", "reason": "it wrote no result (see its master.log)"}]
    assert doc["metrics"]["request_throughput"]["n"] == 2
    assert "repeat 1 measured nothing: it wrote no result" in capsys.readouterr().out


def test_every_repeat_empty_gives_no_means(tmp_path: str, capsys: Any) -> None:
    run_repeats(_options(str(tmp_path), 2), _run_one(empty={1, 2}))
    doc = run_dir.read_json(os.path.join(str(tmp_path), "rep"), run_dir.REPEATS)
    assert doc["runs"] == [] and doc["metrics"] == {} and len(doc["left_out"]) == 2
    text = format_repeats(doc, "D")
    assert "No repeat measured anything" in text and "request_throughput" not in text


def test_failures_are_a_measurement_and_stay(tmp_path: Path) -> None:
    path = write_run(str(tmp_path / "r"), make_records(10, fail=10))
    res = load_result(path)
    assert res is not None and res.completed == 0 and res.failed == 10
    assert nothing_measured(res) is None


def test_a_repeat_with_requests_is_measured(tmp_path: Path) -> None:
    assert nothing_measured(load_result(write_run(str(tmp_path / "r"), make_records(10)))) is None
