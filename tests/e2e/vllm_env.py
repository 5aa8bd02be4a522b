"""Real vLLM (CPU build) for the e2e tier: build the cached environment, start and stop servers.

    env = ensure_vllm()                      # runs setup_vllm.sh (cached: ~1 s)
    with start_vllm_server(env) as server:   # ~2 min to /health on this machine
        requests.get(server.url + "/v1/models")

Servers run in their own process group and are stopped by PID (SIGTERM, then SIGKILL to the group).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.launch.ports import free_port
from vllm_sim.launch import die_with_parent

HERE = Path(__file__).resolve().parent
SETUP_SCRIPT = HERE / "setup_vllm.sh"
DEFAULT_MODEL_NAME = "tiny-llama"
VLLM_VERSION = "0.32.0"

SERVER_ENV = {
    # vLLM picks its platform from its dist's version ("+cpu") or from this variable. With the shim (a dist
    # "vllm" 0.32.0, no "cpu") first on the path, only this variable keeps it on the CPU platform; without
    # it the generic platform imports the AVX-512 vllm._C, and `vllm bench serve` dies of SIGILL on AVX2.
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def server_dtype() -> str:
    """The tiny model's dtype for this CPU: bfloat16, except on a CPU without AVX-512 (AVX2 only), where vLLM for
    CPU's bf16 path is emulated and ~3.5x slower than float32 (a 512-token prefill: 273-350 ms in bf16, 74-97 ms
    in fp32, on an AMD EPYC with AVX2), enough to take the e2e tier past CI's time. VLLM_LOCUST_E2E_DTYPE sets it."""
    forced = os.environ.get("VLLM_LOCUST_E2E_DTYPE")
    if forced:
        return forced
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        return "bfloat16"
    return "bfloat16" if " avx512f" in flags or not flags else "float32"


DEFAULT_SERVER_ARGS = (
    "--dtype",
    server_dtype(),
    "--max-model-len",
    "2048",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--enable-prefix-caching",
)


class VllmSetupError(RuntimeError):
    """setup_vllm.sh failed; `reason` says why in one line (its exit code and last message)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class VllmStartError(RuntimeError):
    """The server exited or did not become healthy in time; the message carries the log tail."""


def cpu_split() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(server CPUs, client CPUs): the allowed CPUs cut in two halves so vLLM for CPU and the load
    generator never take each other's cycles (on 2 cores: vLLM on one, the client on the other).
    One CPU, or VLLM_LOCUST_E2E_PIN=0: no pinning, both get every CPU."""
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    if len(cpus) < 2 or os.environ.get("VLLM_LOCUST_E2E_PIN", "1") == "0":
        return cpus, cpus
    half = len(cpus) // 2
    return cpus[:half], cpus[half:]


def pinned_to(cpus: tuple[int, ...], die_with_us: bool = False):
    """A Popen preexec_fn that moves the child (and everything it starts) onto `cpus`; `die_with_us`: it also
    gets SIGTERM when this process dies, however it dies (a SIGTERM'd or killed test run left vLLM's engine
    process behind, holding a core, since no `with` block or atexit ran)."""
    parent_death = die_with_parent() if die_with_us else None

    def _pin() -> None:
        os.sched_setaffinity(0, cpus)
        if parent_death is not None:
            parent_death()

    return _pin


def client_preexec():
    """preexec_fn for every load generator the e2e tests start (ours, vllm bench serve, raw clients)."""
    return pinned_to(cpu_split()[1])


def default_cache_dir() -> Path:
    env = os.environ.get("VLLM_LOCUST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "vllm-locust"


@dataclass(frozen=True)
class VllmEnv:
    cache_dir: Path
    python: Path
    model_dir: Path
    shim_dir: Path

    @property
    def venv(self) -> Path:
        return self.python.parent.parent

    def bench_command(self) -> list[str]:
        """argv prefix for `vllm bench serve` (run it with env=self.bench_env())."""
        return [str(self.venv / "bin" / "vllm"), "bench", "serve"]

    def server_env(self, cpus: tuple[int, ...]) -> dict[str, str]:
        """The environment of vLLM's server on `cpus`: this one without PYTHONPATH (no shim), SERVER_ENV."""
        penv = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        penv.update(SERVER_ENV)
        # explicit binding: "auto" would reserve a core for the scheduler and spread onto the client's core
        penv["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cpus))
        return penv

    def bench_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of `vllm bench serve`: SERVER_ENV, and the shim first on PYTHONPATH."""
        env = dict(os.environ if base is None else base)
        env.update(SERVER_ENV)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.shim_dir), env.get("PYTHONPATH", "")) if p)
        return env


def ensure_vllm(cache_dir: str | os.PathLike[str] | None = None, *, timeout: float = 1800) -> VllmEnv:
    """Build (or reuse) the venv, shim and tiny model under cache_dir; return their paths."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    proc = subprocess.run(
        ["bash", str(SETUP_SCRIPT), str(cache)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        said = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("[setup_vllm ")]
        last = said[-1].strip() if said else "no message"
        raise VllmSetupError(
            f"setup_vllm.sh exited {proc.returncode}\n--- stderr (tail) ---\n{proc.stderr[-4000:]}",
            reason=f"tests/e2e/setup_vllm.sh exited {proc.returncode}: {last}",
        )
    paths = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return VllmEnv(
        cache_dir=cache.resolve(),
        python=Path(paths["VLLM_PYTHON"]),
        model_dir=Path(paths["VLLM_MODEL"]),
        shim_dir=Path(paths["VLLM_SHIM"]),
    )


@dataclass
class VllmServer:
    proc: subprocess.Popen
    host: str
    port: int
    model_name: str
    log_path: Path
    argv: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_healthy(self, timeout: float = 360.0) -> float:
        """Poll GET /health until 200; return seconds waited. Raises VllmStartError."""
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise VllmStartError(
                    f"vLLM exited with {self.proc.returncode} during startup; log {self.log_path}:\n"
                    + self.log_tail()
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise VllmStartError(
                    f"vLLM not healthy after {timeout:.0f} s; log {self.log_path}:\n" + self.log_tail()
                )
            time.sleep(1.0)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the server's process group, then SIGKILL it after `grace` seconds."""
        if self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # started with start_new_session=True: pgid == pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(pgid, signal.SIGKILL)  # also reaps engine-core children left behind
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_vllm_server(
    env: VllmEnv,
    port: int = 0,
    extra_args: list[str] | tuple[str, ...] = (),
    *,
    host: str = "127.0.0.1",
    model_name: str = DEFAULT_MODEL_NAME,
    log_dir: str | os.PathLike[str] | None = None,
    startup_timeout: float = 360.0,
    wait: bool = True,
    env_overrides: dict[str, str] | None = None,
    cpus: tuple[int, ...] | None = None,
) -> VllmServer:
    """Start vLLM's OpenAI api_server on the tiny model; by default wait until /health answers.
    The server and its engine process run on `cpus` (default: the server half of cpu_split()), with
    vLLM's OpenMP threads bound to those CPUs."""
    if cpus is None:
        cpus = cpu_split()[0]
    if port == 0:
        port = free_port(host)
    log_root = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="vllm-locust-e2e-"))
    log_root.mkdir(parents=True, exist_ok=True)
    log_path = log_root / f"vllm-{port}.log"
    argv = [
        str(env.python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(env.model_dir),
        "--served-model-name",
        model_name,
        "--host",
        host,
        "--port",
        str(port),
        *DEFAULT_SERVER_ARGS,
        *extra_args,
    ]
    penv = env.server_env(cpus)
    penv.update(env_overrides or {})
    with open(log_path, "wb") as logf:
        logf.write(("$ " + " ".join(argv) + "\n").encode())
        logf.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=penv,
            cwd=str(log_root),
            start_new_session=True,
            preexec_fn=pinned_to(cpus, die_with_us=True),
        )
    server = VllmServer(proc=proc, host=host, port=port, model_name=model_name, log_path=log_path, argv=argv)
    if wait:
        try:
            server.wait_healthy(startup_timeout)
        except BaseException:
            server.stop()
            raise
    return server


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape_metrics(url: str, model_name: str | None = DEFAULT_MODEL_NAME) -> dict[str, float]:
    """GET url/metrics: each sample name (``_bucket`` samples left out) -> its value summed over label sets,
    counting only samples whose ``model_name`` label is `model_name` (or that have none)."""
    out: dict[str, float] = {}
    for name, labels, value in metric_samples(url):
        if name.endswith("_bucket"):
            continue
        if model_name is not None and labels.get("model_name", model_name) != model_name:
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def metric_samples(url: str) -> list[tuple[str, dict[str, str], float]]:
    """GET url/metrics: every sample as (name, labels, value)."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is not None and not line.startswith("#"):
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out
