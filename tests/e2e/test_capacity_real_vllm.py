"""`vllm-locust sweep-server` and `--profile` on real vLLM for CPU: one --max-num-batched-tokens point (with
VLLM_CPU_KVCACHE_SPACE as the memory knob), its server started, health-checked, loaded, profiled and stopped by
its process group; the torch profiler's trace files appear.

What only real vLLM shows is here: its command line takes the flag and the env parameter, its health check, its
profiler endpoints and trace files. The sweep's own mechanics over several points (one server per point, each
stopped before the next, a point that fails to start, the combined report) are the simulator's test,
tests/integration/capacity/test_sweep_server.py: a second vLLM point here cost ~45 s and showed nothing more."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.vllm_env import (
    DEFAULT_MODEL_NAME,
    DEFAULT_SERVER_ARGS,
    SERVER_ENV,
    VllmEnv,
    client_preexec,
    cpu_split,
    free_port,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_sweep_server_and_profile(vllm_env: VllmEnv, tmp_path: Path) -> None:
    """~1.5-2.5 min: sweep-server starts a vLLM server of its own (model load, warm-up), profiles a few engine
    iterations with torch's profiler and stops it; one step, 12 requests."""
    port = free_port()
    traces = tmp_path / "traces"
    # a few engine iterations, no frontend trace and no Python stacks: with stacks, vLLM's worker builds its
    # CPU-time table (key_averages) for minutes on one core after /stop_profile, and the load stalls meanwhile
    profiler = json.dumps(
        {
            "profiler": "torch",
            "torch_profiler_dir": str(traces),
            "max_iterations": 8,
            "ignore_frontend": True,
            "torch_profiler_with_stack": False,
        }
    )
    server_cpus = ",".join(map(str, cpu_split()[0]))
    env_args = [
        f"{k}={v}"
        for k, v in {
            **SERVER_ENV,
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_OMP_THREADS_BIND": server_cpus,
        }.items()
        if k != "VLLM_CPU_KVCACHE_SPACE"
    ]
    serve = shlex.join(
        [
            "env",
            "-u",
            "PYTHONPATH",
            "-u",
            "VIRTUAL_ENV",
            *env_args,
            "taskset",
            "-c",
            server_cpus,
            str(vllm_env.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(vllm_env.model_dir),
            "--served-model-name",
            DEFAULT_MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *DEFAULT_SERVER_ARGS,
            "--profiler-config",
            profiler,
        ]
    )
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "sweep-server",
        "--serve-cmd",
        serve,
        "--param",
        "max-num-batched-tokens=512",
        "--param",
        "env:VLLM_CPU_KVCACHE_SPACE=1",
        "--health-timeout",
        "400",
        "--host",
        f"http://127.0.0.1:{port}",
        "--profile",
        "--users",
        "2",
        "--num-prompts",
        "12",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--ignore-eos",
        "--workers",
        "1",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "ss",
    ]
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=880, cwd=ROOT, preexec_fn=client_preexec()
    )
    assert p.returncode in (0, 5), p.stdout[-4000:] + p.stderr[-3000:]  # 5: client-bound on 1 core is allowed
    doc = json.loads((tmp_path / "ss" / "sweep.json").read_text())
    steps = doc["steps"]
    assert [s["params"] for s in steps] == [
        {"max-num-batched-tokens": "512", "env:VLLM_CPU_KVCACHE_SPACE": "1"}
    ]
    for s in steps:
        assert s["started"] and 1 < s["startup_s"] < 400, s
        assert s["completed"] == 12 and s["server_exit_code"] is not None
        first = (Path(s["run_dir"]) / "server.log").read_text().splitlines()[0]
        assert f"--max-num-batched-tokens {s['params']['max-num-batched-tokens']}" in first
        res = json.loads((Path(s["run_dir"]) / "result.json").read_text())
        assert res["profile"]["profiled"], res["profile"]
    files = [f for f in traces.rglob("*") if f.is_file()]
    assert files and any(".json" in f.name or ".pt.trace" in f.name for f in files), sorted(map(str, files))
    assert (tmp_path / "ss" / "report" / "report.html").exists()
    print(
        json.dumps(
            {s["label"]: {"startup_s": s["startup_s"], "out_tok_s": s["output_throughput"]} for s in steps}
        )
    )
    print(f"{len(files)} trace file(s): {sorted(f.name for f in files)[:4]}")
    assert os.path.isdir(traces)
