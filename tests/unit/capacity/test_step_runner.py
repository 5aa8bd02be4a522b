"""The step runner that one run and the multi-run modes share: one command line for the embedded simulator (the
run's API key in it, whether one run or a sweep's steps talk to it), and the names and seeds of every step."""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from typing import Any

import pytest

from orchestration.capacity.repeats import run_repeats
from orchestration.capacity.search import run_search
from orchestration.capacity.steps import shared_host, simulator_args
from orchestration.capacity.sweep import run_sweep
from tests.unit.report.helpers import make_records, write_run
from vllm_users import run_dir as R
from vllm_users.client import stdlib_http
from vllm_users.options import API_KEY_ENV, Options, build, changed

pytestmark = pytest.mark.timeout(60)


def _status(url: str, key: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with stdlib_http.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_a_shared_simulator_requires_the_runs_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # a sweep, search or repeats with --api-key and no --host: the simulator its steps share checks the key, as
    # the simulator of one run does (it started without it, and any key or none was let in)
    for name in API_KEY_ENV:
        monkeypatch.delenv(name, raising=False)
    a = build(api_key="k-test", sim_args="--fixed --ttft-ms 1 --itl-ms 1")
    with shared_host(a) as host:
        assert _status(host + "/v1/models", None) == 401
        assert _status(host + "/v1/models", "k-test") == 200


def test_one_command_line_for_the_embedded_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in API_KEY_ENV:
        monkeypatch.delenv(name, raising=False)
    assert simulator_args(build(sim_args="--fixed --ttft-ms 5")) == ["--fixed", "--ttft-ms", "5"]
    assert simulator_args(build(api_key="k")) == ["--api-key", "k"]
    assert simulator_args(build(api_key="k", sim_args="--api-key other")) == [
        "--api-key",
        "other",
    ]  # theirs wins
    monkeypatch.setenv(API_KEY_ENV[0], "from-env")
    assert simulator_args(Options()) == ["--api-key", "from-env"]


def _fake_run(seen: list[Options]) -> Any:
    def run_one(b: Options, watch: Any = None) -> int:
        seen.append(b)
        # 1 user: the slowest
        recs = make_records(40, ttft_ms=20.0, seed=len(seen), concurrency=b.load.users or 8)
        write_run(os.path.join(b.outputs.output_dir, b.outputs.run_name), recs)
        return 0

    return run_one


def _names(seen: list[Options]) -> list[tuple[str, int]]:
    return [(b.outputs.run_name, b.request.seed) for b in seen]


def test_steps_are_named_and_seeded_as_before(tmp_path: str) -> None:
    base = build(host="http://127.0.0.1:9", seed=5, output_dir=str(tmp_path), no_report=True)
    seen: list[Options] = []
    run_sweep(changed(base, sweep="rates:2,4.5", run_name="r"), _fake_run(seen))
    run_sweep(changed(base, sweep="concurrency:1,16", run_name="c"), _fake_run(seen))
    run_repeats(changed(base, repeats=2, run_name="p"), _fake_run(seen))
    assert _names(seen) == [
        ("step-01-rate-2", 5),
        ("step-02-rate-4.5", 1005),
        ("step-01-c001", 5),
        ("step-02-c016", 1005),
        ("repeat-01", 5),
        ("repeat-02", 6),
    ]
    seen.clear()
    run_sweep(changed(base, sweep="auto:1", run_name="a"), _fake_run(seen))
    names = _names(seen)
    assert names[:2] == [("step-01-synchronous", 5), ("step-02-throughput", 1005)]
    assert len(names) == 3 and re.fullmatch(r"step-03-rate-[0-9.]+", names[2][0]) and names[2][1] == 2005
    seen.clear()
    run_search(
        changed(base, find_max_rate=True, goodput="ttft:500", search_steps=2, run_name="s"),
        _fake_run(seen),
    )
    assert seen[0].outputs.run_name == "step-01-probe" and seen[0].request.seed == 5
    assert re.fullmatch(r"step-02-rate-[0-9.]+", seen[1].outputs.run_name) and seen[1].request.seed == 1005
    for d in ("r", "c", "p", "a", "s"):  # each step's directory inside its parent
        assert all(
            os.path.isdir(os.path.join(tmp_path, d, n))
            for n in os.listdir(os.path.join(tmp_path, d))
            if n.startswith(("step-", "repeat-"))
        )


def test_directory_names(tmp_path: str) -> None:
    assert R.named_dir("out", "mine", "sweep") == os.path.join("out", "mine")
    assert re.fullmatch(r"out/\d{8}-\d{6}-chat", R.named_dir("out", "", "chat"))
    assert R.step_name(3, "rate-4.5") == "step-03-rate-4.5" and R.repeat_name(12) == "repeat-12"
    assert R.point_name(2, "max-num-seqs=8,env:X=a b") == "point-02-max-num-seqs=8_env_X=a_b"
