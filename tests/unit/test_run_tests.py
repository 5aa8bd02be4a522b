"""scripts/run_tests.py: the jobs that need a setup running beside the suite wait for it, the others do not, and a
failed setup's reason reaches its jobs (the e2e tier then skips saying why)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_tests", ROOT / "scripts" / "run_tests.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["run_tests"] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


rt = _runner()


def _jobs() -> tuple[object, object, object]:
    e2e = rt.Job(["tests/e2e/test_vllm_smoke.py"], 10.0)
    gateway = rt.Job(["tests/integration/gateways/test_python_gateway.py"], 10.0)
    other = rt.Job(["tests/integration/core/test_netns.py"], 10.0)
    return e2e, gateway, other


def test_what_each_job_waits_for() -> None:
    e2e, gateway, other = _jobs()
    assert (e2e.needs, gateway.needs, other.needs) == (["vllm"], ["litellm"], [])


def test_without_setups_everything_is_ready() -> None:
    s = rt.Setups(None, 0.0)
    assert all(s.ready(j) for j in _jobs())


def test_a_job_waits_for_its_setup_and_no_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    e2e, gateway, other = _jobs()
    (tmp_path / "vllm.log").write_text("[setup_vllm 10:00:00] installing torch\n")
    (tmp_path / "litellm.log").write_text("")
    s = rt.Setups(tmp_path, rt.time.monotonic())
    assert not s.ready(e2e) and not s.ready(gateway) and s.ready(other)
    (tmp_path / "vllm.rc").write_text("0\n")
    assert s.ready(e2e) and e2e.env == {} and not s.ready(gateway)
    assert "setup vllm: ready" in capsys.readouterr().out


def test_a_failed_setup_lets_its_jobs_run_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    e2e, gateway, _ = _jobs()
    (tmp_path / "vllm.log").write_text(
        "[setup_vllm 10:00:00] building venv\nsetup_vllm: need Python >=3.11,<3.15 (set VLLM_LOCUST_PYTHON)\n"
    )
    (tmp_path / "vllm.rc").write_text("2\n")
    (tmp_path / "litellm.log").write_text("ERROR: No matching distribution found for litellm\n")
    (tmp_path / "litellm.rc").write_text("1\n")
    s = rt.Setups(tmp_path, rt.time.monotonic())
    assert s.ready(e2e) and s.ready(gateway)
    assert e2e.env == {
        "VLLM_LOCUST_E2E_UNAVAILABLE": "setup vllm exited 2: setup_vllm: need Python >=3.11,<3.15 (set "
        "VLLM_LOCUST_PYTHON)"
    }
    assert gateway.env == {}  # its test finds no proxy and skips, saying how to build it
    out = capsys.readouterr().out
    assert out.count("SETUP FAILED") == 2 and "No matching distribution" in out


def test_a_setup_never_started_does_not_hold_its_jobs(tmp_path: Path) -> None:
    e2e, _, _ = _jobs()
    assert rt.Setups(tmp_path, rt.time.monotonic()).ready(e2e) and e2e.env == {}


def test_a_setup_past_its_limit_is_taken_as_failed(tmp_path: Path) -> None:
    e2e, _, _ = _jobs()
    (tmp_path / "vllm.log").write_text("Collecting torch\n")
    s = rt.Setups(tmp_path, rt.time.monotonic() - rt.Setups.LIMIT_S - 1)
    assert s.ready(e2e) and "still running" in e2e.env["VLLM_LOCUST_E2E_UNAVAILABLE"]
