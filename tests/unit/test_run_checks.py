"""`vllm-locust run`'s checks before anything is sent: an --output-dir that cannot hold the run, windows that
would leave nothing to measure, and trace offsets no run could wait for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestration.commands.run import check_windows
from vllm_users import run_dir
from vllm_users.errors import TraceError, UsageError
from vllm_users.options import build
from vllm_users.workload.trace_schedule import MAX_OFFSET_S, check_trace


def test_an_output_dir_below_a_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(UsageError, match=f"--output-dir {f}/a/b: {f} is a file, not a directory"):
        run_dir.check_writable(str(f / "a" / "b"))
    with pytest.raises(UsageError, match="is a file"):
        run_dir.make_dir(str(f / "run"))
    run_dir.check_writable(str(tmp_path / "new" / "dir"))  # made later: fine, and not made by the check
    assert not (tmp_path / "new").exists()
    run_dir.make_dir(str(tmp_path / "new" / "dir"))
    assert os.listdir(tmp_path / "new" / "dir") == []  # the probe file is gone


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permissions")
def test_a_read_only_output_dir_is_named(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(UsageError, match="not writable"):
        run_dir.check_writable(str(ro / "runs"))


@pytest.mark.parametrize(
    ("opts", "said"),
    [
        ({"warmup": "500r", "num_prompts": 10}, "--warmup 500r leaves out 500 requests, the run has 10"),
        ({"warmup": "5r", "cooldown": "5r", "num_prompts": 10}, "--warmup 5r --cooldown 5r leaves out 10"),
        ({"warmup": "30s", "run_time": 20.0}, "--warmup 30s covers 30 s, the run lasts 20 s"),
    ],
)
def test_windows_that_take_the_whole_run_are_refused(opts: dict, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        check_windows(build(**opts))


def test_windows_that_leave_requests_pass() -> None:
    check_windows(build(warmup="9r", num_prompts=10))
    check_windows(build(warmup="10s", run_time=20.0))
    check_windows(
        build(warmup="30s", num_prompts=10)
    )  # a time window against a budget: known only at the end


def _trace(tmp_path: Path, stamps: list[str]) -> str:
    f = (
        tmp_path / f"t{len(list(tmp_path.iterdir()))}.jsonl"
    )  # a new name each: the trace is read once per path
    f.write_text("".join(f'{{"timestamp": {t}, "input_len": 4}}\n' for t in stamps))
    return str(f)


def test_a_trace_offset_beyond_the_bound_names_its_line(tmp_path: Path) -> None:
    path = _trace(tmp_path, ["5", "1e308", "6"])
    with pytest.raises(TraceError, match=f"^{path}:2: .* beyond the bound of 30 days"):
        check_trace(build(trace=path).trace, "chat", None)
    ok = _trace(tmp_path, ["0", str(MAX_OFFSET_S)])
    assert "2 requests" in check_trace(build(trace=ok).trace, "chat", None)
    with pytest.raises(TraceError, match=":2: "):  # --time-scale 0.5 stretches it past the bound
        check_trace(build(trace=ok, time_scale=0.5).trace, "chat", None)


def test_a_run_without_result_on_a_full_disk_says_the_disk_is_full(tmp_path: Path, monkeypatch) -> None:
    import shutil

    from orchestration.launch import launcher

    line = launcher.no_result_line(str(tmp_path), 1)
    assert line.startswith("the master exited (1) without writing results; see ")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(100, 100, 0))  # type: ignore[attr-defined]
    line = launcher.no_result_line(str(tmp_path), 1)
    assert line.startswith(f"the disk holding {tmp_path} is full (0 bytes free)")
