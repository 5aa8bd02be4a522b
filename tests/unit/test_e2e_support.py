"""The e2e tier's own logic, without vLLM: ISA -> kernel, environments, skip reasons, time scaling, golden kinds."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.e2e import conftest as e2e_conftest
from tests.e2e import speed
from tests.e2e.cpu_platform import PlatformProbe, cpu_flags, cpu_isa, cpu_model, expected_kernel
from tests.e2e.test_golden_shapes import GOLDEN, STREAMS, events, kind_pattern, shape
from tests.e2e.vllm_env import VllmEnv

AVX2_INFO = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 avx avx2 fma\n\nprocessor\t: 1\n"
AVX512_INFO = "model name\t: Intel Xeon\nflags\t\t: avx avx2 avx512f avx512bw avx512vl avx512dq\n"


def test_isa_and_kernel_follow_vllm_cpu_platform_choice():
    assert cpu_isa(cpu_flags(AVX2_INFO)) == "AVX2"
    assert cpu_model(AVX2_INFO) == "AMD EPYC"
    assert cpu_isa(cpu_flags(AVX512_INFO)) == "AVX512"
    assert cpu_isa(cpu_flags(AVX512_INFO.replace("avx512dq", "avx512dq avx512_bf16"))) == "AVX512_BF16"
    assert cpu_isa({"avx512f", "avx2"}) == "AVX2"  # torch wants F, BW, VL and DQ for its AVX-512 path
    assert expected_kernel("AVX2") == "_C_AVX2.abi3.so"
    assert expected_kernel("AVX512") == "_C_AVX512.abi3.so"
    assert expected_kernel("AVX512_BF16") == "_C.abi3.so"


def test_probe_describes_a_crash():
    p = PlatformProbe(-4, "UnspecifiedPlatform", False, (), "")
    assert p.describe() == "vLLM platform UnspecifiedPlatform, kernels none, killed by SIGILL"


def test_bench_and_server_environments_pin_the_cpu_platform(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = VllmEnv(tmp_path, tmp_path / "bin" / "python", tmp_path / "model", tmp_path / "shim")
    bench = env.bench_env()
    assert bench["VLLM_TARGET_DEVICE"] == "cpu"
    assert bench["PYTHONPATH"].split(":") == [str(tmp_path / "shim"), "/elsewhere"]
    server = env.server_env((0,))
    assert server["VLLM_TARGET_DEVICE"] == "cpu" and "PYTHONPATH" not in server
    assert server["VLLM_CPU_OMP_THREADS_BIND"] == "0"


def test_unavailable_reasons(monkeypatch):
    for var in ("VLLM_LOCUST_SKIP_E2E", "VLLM_LOCUST_E2E_UNAVAILABLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(e2e_conftest, "is_x86_64", lambda: True)
    assert e2e_conftest.unavailable_reason() is None
    monkeypatch.setattr(e2e_conftest, "is_x86_64", lambda: False)
    assert "needs an x86-64 CPU" in (e2e_conftest.unavailable_reason() or "")
    monkeypatch.setenv("VLLM_LOCUST_E2E_UNAVAILABLE", "tests/e2e/setup_vllm.sh exited 2: need Python >=3.11")
    assert e2e_conftest.unavailable_reason() == (
        "real-vLLM e2e tier cannot run: tests/e2e/setup_vllm.sh exited 2: need Python >=3.11"
    )
    monkeypatch.setenv("VLLM_LOCUST_SKIP_E2E", "1")
    assert e2e_conftest.unavailable_reason() == e2e_conftest.SKIP_REASON


def test_time_limits_scale_with_measured_slowness(monkeypatch):
    monkeypatch.setattr(speed, "_measured", [])
    assert speed.scaled(300) == 300  # not measured yet
    speed._measured.append(speed.Speed(speed.REFERENCE_TOK_S / 2))
    assert speed.scaled(300) == pytest.approx(600)
    speed._measured.append(speed.Speed(speed.REFERENCE_TOK_S * 3))
    assert speed.scaled(300) == 300  # a faster machine keeps the dev box's limits


def test_golden_kind_patterns_and_ordered_shapes():
    pats = {n: kind_pattern(events((GOLDEN / f"{n}.sse").read_bytes())) for n in STREAMS}
    assert pats == {
        "chat_stream": "role content+ finish usage done",
        "chat_stream_no_usage": "role content+ finish done",
        "chat_stream_continuous_usage": "role content+ finish usage done",
        "completions_stream": "content+ finish usage done",
    }
    assert shape({"a": 1, "b": [None]}) != shape({"b": [None], "a": 1})  # field order counts


class _Counters(BaseHTTPRequestHandler):
    moving = True
    n = 0

    def do_GET(self) -> None:
        type(self).n += 1 if self.moving else 0
        body = f'vllm:generation_tokens_total{{model_name="m"}} {self.n}\n'.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a) -> None:
        pass


@pytest.mark.parametrize("moving", [True, False])
def test_load_runs_wait_while_vllm_progresses_and_stop_when_it_stalls(moving):
    handler = type("H", (_Counters,), {"moving": moving, "n": 0})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3); print('done')"], stdout=subprocess.PIPE, text=True
    )
    try:
        if moving:  # a run longer than the stall limit finishes, because the server keeps counting
            assert speed.communicate_progressing(proc, url, stall_s=1.0).strip() == "done"
        else:
            t0 = time.monotonic()
            with pytest.raises(subprocess.TimeoutExpired):
                speed.communicate_progressing(proc, url, stall_s=1.0)
            assert time.monotonic() - t0 < 2.5 and proc.poll() is None
    finally:
        proc.kill()
        proc.communicate()
        srv.shutdown()
        srv.server_close()


def test_unavailable_tier_skips_loudly_in_one_summary_line():
    """What scripts/test.sh passes on when setup_vllm.sh fails: every e2e test skipped, one -ra line, a section."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_LOCUST_")}
    env["VLLM_LOCUST_E2E_UNAVAILABLE"] = "tests/e2e/setup_vllm.sh exited 2: need Python >=3.11,<3.15"
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/e2e/test_vllm_smoke.py"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED [")]
    assert len(lines) == 1 and lines[0].startswith("SKIPPED [3]"), proc.stdout[-3000:]
    assert lines[0].endswith(
        "real-vLLM e2e tier cannot run: tests/e2e/setup_vllm.sh exited 2: need Python >=3.11,<3.15"
    )
    assert "SKIPPED: real-vLLM e2e tier cannot run" in proc.stdout  # the tier's own summary section
