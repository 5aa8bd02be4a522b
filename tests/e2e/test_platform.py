"""vLLM runs on its CPU platform, with the kernels built for this CPU, wherever the tier starts it.

`vllm bench serve` runs with a metadata shim (a dist "vllm" 0.32.0) first on PYTHONPATH. vLLM then no longer
sees "cpu" in its version and, unless VLLM_TARGET_DEVICE=cpu, takes the generic platform, which imports the
AVX-512 build of its kernels: SIGILL on an AVX2 CPU, and the wrong platform on any CPU. This test fails on
any machine where that happens, not only on AVX2 ones.
"""

from __future__ import annotations

from tests.e2e.cpu_platform import cpu_flags, cpu_isa, expected_kernel, probe_platform
from tests.e2e.vllm_env import cpu_split


def _check(probe, where: str) -> None:
    want = expected_kernel(cpu_isa(cpu_flags()))
    assert probe.platform is not None, f"{where}: vLLM did not start:\n{probe.output}"
    assert probe.is_cpu, f"{where}: vLLM took the {probe.platform} platform, not the CPU one\n{probe.output}"
    assert probe.returncode == 0, f"{where}: {probe.describe()}\n{probe.output}"
    assert probe.kernels == (want,), (
        f"{where}: {probe.describe()}; this CPU ({cpu_isa(cpu_flags())}) needs {want}"
    )


def test_bench_environment_loads_cpu_kernels_for_this_isa(bench_platform):
    _check(bench_platform, "vllm bench serve's environment")


def test_server_environment_loads_cpu_kernels_for_this_isa(vllm_env):
    _check(probe_platform(vllm_env.python, vllm_env.server_env(cpu_split()[0])), "the server's environment")
