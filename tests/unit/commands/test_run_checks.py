"""`vllm-locust run`'s checks before anything is sent: an --output-dir that cannot hold the run, windows that
would leave nothing to measure, and trace offsets no run could wait for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestration.commands.run import check_windows, schedule_span
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
    )  # a time window against a budget in a closed loop: the server's speed decides, known only at the end


@pytest.mark.parametrize(
    ("opts", "span"),
    [
        ({"request_rate": float("inf")}, 0.0),  # all at once
        ({"request_rate": 10.0, "burstiness": float("inf")}, 1.9),  # constant gaps: 19 of 0.1 s
        (
            {
                "ramp_up_strategy": "linear",
                "ramp_up_start_rps": 10.0,
                "ramp_up_end_rps": 10.0,
                "request_rate": 10.0,  # as run's checks set it: open loop, at most this fast
                "burstiness": float("inf"),
            },
            1.9,
        ),
    ],
)
def test_a_warmup_longer_than_an_open_loop_schedule_is_refused(opts: dict, span: float) -> None:
    a = build(warmup="2s", num_prompts=20, **opts)
    assert schedule_span(a, ["chat"]) == pytest.approx(span)
    with pytest.raises(UsageError, match=r"^--warmup 2s takes every request: the schedule starts all 20"):
        check_windows(a)
    check_windows(
        build(warmup="1.5s", num_prompts=20, request_rate=1.0, burstiness=float("inf"))
    )  # 19 s span


def test_a_poisson_schedule_is_judged_by_its_own_draw() -> None:
    a = build(num_prompts=50, request_rate=5.0, seed=3)
    span = schedule_span(a, ["chat"])
    assert span is not None and 0 < span < 50  # 49 gaps of mean 0.2 s
    check_windows(build(warmup=f"{span * 0.99:.6f}s", num_prompts=50, request_rate=5.0, seed=3))
    with pytest.raises(UsageError, match="takes every request"):
        check_windows(build(warmup=f"{span * 1.01:.6f}s", num_prompts=50, request_rate=5.0, seed=3))


@pytest.mark.parametrize(
    ("opts", "scenarios", "files"),
    [
        ({"users": 8}, ["chat"], []),  # closed loop: starts follow completions
        ({"request_rate": float("inf"), "num_prompts": 300}, ["chat"], []),  # more due than the 256 slots
        ({"request_rate": float("inf"), "max_concurrency": 4}, ["chat"], []),  # the cap holds some back
        ({"request_rate": float("inf")}, ["tools"], []),  # follow-ups start on completions
        ({"request_rate": float("inf")}, ["multi-turn"], []),
        ({"request_rate": float("inf")}, [], ["agent.py"]),  # user code: any number of requests per ticket
        ({"request_rate": float("inf"), "web_ui": True}, ["chat"], []),  # the rate may change live
        ({"request_rate": 5.0, "run_time": 60.0, "num_prompts": None}, ["chat"], []),  # a budget of time
    ],
)
def test_starts_the_server_decides_are_not_refused(opts: dict, scenarios: list, files: list) -> None:
    a = build(**{"warmup": "30s", "num_prompts": 20, **opts})
    assert schedule_span(a, scenarios, files) is None
    check_windows(a, scenarios, files)


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


def test_a_run_that_starts_simulator_replicas_reads_their_header() -> None:
    """--sim-args "--replicas 3" gave no per-replica table unless --replica-header x-sim-replica was also given:
    the run started the replicas, so it reads their header itself."""
    from orchestration.commands.run import with_sim_replicas

    def header(**kw: object) -> str:
        return with_sim_replicas(build(**kw)).server.replica_header

    assert header(sim_args="--replicas 3") == "x-sim-replica"
    assert header(sim_args="--replicas 3 --router prefix") == "x-sim-replica"
    assert header(sim_args="--replicas 1") == "" and header() == ""  # one engine sends no such header
    assert header(sim_args="--replicas 3", replica_header="x-mine") == "x-mine"  # the user's choice stays
    assert header(sim_args="--replicas 3", host="http://127.0.0.1:8000") == ""  # not ours: not known


ROOT = Path(__file__).resolve().parents[3]
FILE_FLAGS = ("--twin", "--trace", "-f", "--dataset", "--config")


def _readme_simulator_runs() -> list[list[str]]:
    """README's `vllm-locust run` commands that start the embedded simulator (no --host), as argv, those whose
    named files are in this checkout (a twin.json or a trace of the user's own is not)."""
    import re
    import shlex

    out = []
    for block in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.startswith("vllm-locust run "):
                continue
            argv = shlex.split(line.split("  #")[0].strip())
            if "--host" in argv:
                continue
            named = [argv[i + 1] for i, t in enumerate(argv[:-1]) if t in FILE_FLAGS]
            if all((ROOT / f).exists() for f in named):
                out.append(argv[2:])
    return out


def test_readme_simulator_examples_run_as_written() -> None:
    """Each of README's simulator examples parses, its --sim-args pass the simulator's own check, and the
    simulator it starts serves every model it sends to: the --class example failed until --sim-args
    "--model base" was added, its preflight finding 'base' not served."""
    from orchestration.capacity.steps import simulator_args
    from orchestration.commands.run import check_sim_args, run_options, with_sim_model
    from vllm_sim.adapters import parse_lora_modules
    from vllm_sim.config import parse_config
    from vllm_users.model_mix import parse_mix
    from vllm_users.workload.classes import class_models

    runs = _readme_simulator_runs()
    assert any("--class" in argv for argv in runs) and any("-f" in argv for argv in runs)
    for argv in runs:
        a = with_sim_model(run_options(argv))
        check_sim_args(a)
        cfg = parse_config(simulator_args(a))
        served = {cfg.model, *parse_lora_modules(cfg.lora_modules)}
        mix = parse_mix(a.server.model)
        wanted = {*(mix.names if mix else ()), *class_models(a.classes.class_)}
        assert wanted <= served, (argv, wanted - served)


def test_the_embedded_simulator_serves_the_runs_model() -> None:
    from orchestration.commands.run import with_sim_model

    def sim_args(**kw: object) -> str:
        return with_sim_model(build(**kw)).simulator.sim_args

    assert sim_args(model="base") == "--model base"
    assert (
        sim_args(model="base:3,lora-a:1", sim_args="--lora-modules lora-a")
        == "--model base --lora-modules lora-a"
    )
    assert sim_args(model="base", sim_args="--model other") == "--model other"  # --sim-args' own wins
    assert sim_args(model="base", host="http://127.0.0.1:8000") == ""  # not ours to start
    assert sim_args(sim_args="--replicas 2") == "--replicas 2"  # no --model: the simulator's default


def test_a_run_without_result_on_a_full_disk_exits_10_not_7(tmp_path: Path, monkeypatch) -> None:
    import shutil

    from orchestration.launch import launcher
    from vllm_users import exit_codes

    o = build()
    assert launcher._finish(o, str(tmp_path), 1, False) == exit_codes.ABORTED  # the master died
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(100, 100, 0))  # type: ignore[attr-defined]
    assert launcher._finish(o, str(tmp_path), 1, False) == exit_codes.WRITE_FAILED
