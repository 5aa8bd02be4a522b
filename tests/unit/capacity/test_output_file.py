"""--output-file with the multi-run modes: --repeats writes its repeats summary there (repeats.json's object),
--sweep and --find-max-rate their sweep.json; no step writes it; --help says what is written (a user must learn
which of the two documents the file holds)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from orchestration.capacity.repeats import run_repeats
from orchestration.capacity.search import run_search
from orchestration.capacity.sweep import run_sweep
from tests.unit.report.helpers import make_records, write_run
from vllm_users import run_dir
from vllm_users.options import SPECS, Options, build

HOST = "http://127.0.0.1:9"  # nothing listens: the sweep's expert counters find none at once


def _options(tmp: str, **kw: Any) -> Options:
    return build(
        host=HOST,
        output_dir=tmp,
        run_name="multi",
        no_report=True,
        output_file=os.path.join(tmp, "out", "summary.json"),
        **kw,
    )


def _fake_run(steps: list[Options]) -> Any:
    def run_one(b: Options, watch: Any = None) -> int:
        assert not b.outputs.output_file  # a step never writes the parent's --output-file
        steps.append(b)
        write_run(
            os.path.join(b.outputs.output_dir, b.outputs.run_name),
            make_records(40, ttft_ms=20.0, seed=len(steps)),
        )
        return 0

    return run_one


def _written(a: Options) -> dict[str, Any]:
    with open(a.outputs.output_file) as fh:
        return dict(json.load(fh))


def test_repeats_write_their_summary_to_the_output_file(tmp_path: str) -> None:
    a = _options(str(tmp_path), repeats=2)
    steps: list[Options] = []
    assert run_repeats(a, _fake_run(steps)) == 0
    assert len(steps) == 2
    doc = _written(a)
    assert doc == run_dir.read_json(os.path.join(str(tmp_path), "multi"), run_dir.REPEATS)
    assert doc["repeats"] == 2 and doc["metrics"]["request_throughput"]["n"] == 2


def test_a_sweep_writes_its_sweep_json_to_the_output_file(tmp_path: str) -> None:
    a = _options(str(tmp_path), sweep="rates:2,4")
    assert run_sweep(a, _fake_run([])) == 0
    doc = _written(a)
    assert doc == run_dir.read_json(os.path.join(str(tmp_path), "multi"), run_dir.SWEEP)
    assert [s["target"] for s in doc["steps"]] == [2.0, 4.0]


def test_the_search_writes_its_sweep_json_to_the_output_file(tmp_path: str) -> None:
    a = _options(str(tmp_path), find_max_rate=True, goodput="ttft:500", search_steps=2)
    run_search(a, _fake_run([]))
    doc = _written(a)
    assert doc == run_dir.read_json(os.path.join(str(tmp_path), "multi"), run_dir.SWEEP)
    assert doc["kind"] == "max_rate_search"


@pytest.mark.parametrize("word", ["--repeats", "repeats.json", "--sweep", "--find-max-rate", "sweep.json"])
def test_the_help_says_what_is_written(word: str) -> None:
    assert word in SPECS["output_file"].help
