"""Shared helpers of the benchmark suite: simulator, `vllm-locust run`, CPU sampling (reference_client.py: the raw-socket floor).

Measurement method used by every script (so ours and the peers are measured the same way):
- the simulator (fixed mode, ground truth) runs pinned to core 0; the client under test to core 1;
- a sampler thread polls every 0.25 s the simulator's ``/sim/stats`` (``generation_tokens``: tokens
  written so far) and ``/proc/PID/stat`` (utime + stime) of the client's measuring processes: for
  vllm-locust the worker processes listed in ``RUN_DIR/pids.json`` (not the master), for a peer its
  process (and children);
- capacity = tokens streamed / client CPU-seconds over the steady window: from 2 s after the load's first
  tokens (the preflight's few tokens before them are not the load) to 1 s before the last one (start-up
  imports and the tail are left out).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vllm_sim import probe  # noqa: E402
from vllm_sim.launch import SimProcess, start_simulator  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CACHE = Path(os.environ.get("VLLM_LOCUST_CACHE", str(Path.home() / ".cache" / "vllm-locust")))
NCPU = os.cpu_count() or 1
PIN = NCPU > 1 and shutil.which("taskset") is not None  # pin server and client to their own cores
SIM_CPU = 0
CLIENT_CPU = 1 if NCPU > 1 else 0
TTFT_MS, ITL_MS = 50.0, 10.0
CLK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------- small utilities
def pctl(xs: Sequence[float], q: float) -> float:
    """Percentile by linear interpolation (numpy's default), q in 0..100."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(xs: Sequence[float]) -> float:
    """Median ignoring None/NaN; NaN when empty."""
    v = [x for x in xs if x is not None and x == x]
    return statistics.median(v) if v else float("nan")


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": NCPU,
        "cpu_model": model,
        "python": platform.python_version(),
        "host": platform.node(),
        "load_avg_at_start": os.getloadavg(),
    }


def write_json(name: str, data: dict[str, Any]) -> Path:
    """Write benchmarks/results/NAME.json (with the date and machine) and return the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), **data}
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path


def fmt(v: Any) -> str:
    """A table cell."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "-"
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.2f}"
    return str(v)


def print_table(rows: list[dict[str, Any]], cols: list[str], title: str = "") -> None:
    """Print rows as an aligned text table."""
    if title:
        print(f"\n== {title}")
    cells = [[fmt(r.get(c)) for c in cols] for r in rows]
    w = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w[i]) for i, c in enumerate(cols)))
    for x in cells:
        print("  ".join(v.rjust(w[i]) for i, v in enumerate(x)))
    sys.stdout.flush()


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process in seconds (None once it is gone)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(f[11]) + int(f[12])) / CLK


def children(pid: int) -> list[int]:
    """Direct and indirect child pids (Linux /proc/PID/task/*/children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(x) for x in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


# ----------------------------------------------------------------- simulator
def start_sim(
    itl_ms: float = ITL_MS, ttft_ms: float = TTFT_MS, extra: Sequence[str] = (), cpu: int | None = SIM_CPU
) -> SimProcess:
    """The simulator in fixed (ground-truth) mode, pinned to ``cpu``."""
    args = ["--fixed", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms), "--max-num-seqs", "4096", *extra]
    return start_simulator(args, cpu=cpu if PIN else None)


def sim_stats(url: str) -> dict[str, Any]:
    """The simulator's /sim/stats."""
    return probe.request(url, "/sim/stats", timeout=5).json()


LOAD_START_FRACTION = 0.01  # Sampler.window: the load has started once 1 % of the run's tokens are out


class Sampler(threading.Thread):
    """Poll the simulator's token counter and the CPU time of some pids every ``interval`` seconds."""

    def __init__(self, sim_url: str, pids_fn: Any, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.sim_url = sim_url
        self.pids_fn = pids_fn  # () -> list of pids to sum (may change while the client starts)
        self.interval = interval
        self.samples: list[tuple[float, int, float]] = []  # (perf, tokens, cpu_s)
        self._halt = threading.Event()
        self._last: dict[int, float] = {}

    def _cpu(self) -> float:
        for p in self.pids_fn():
            c = cpu_seconds(p)
            if c is not None:
                self._last[p] = c  # a pid that exits keeps its last reading
        return sum(self._last.values())

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                tokens = int(sim_stats(self.sim_url)["generation_tokens"])
            except (OSError, ValueError, KeyError):
                tokens = -1
            if tokens >= 0:
                self.samples.append((time.perf_counter(), tokens, self._cpu()))
            self._halt.wait(self.interval)

    def stop(self) -> None:
        """Stop and join."""
        self._halt.set()
        self.join(5)

    def window(self, skip_s: float = 2.0, tail_s: float = 1.0) -> dict[str, float]:
        """Tokens, CPU-seconds and wall time over the steady window of the load."""
        s = [x for x in self.samples]
        moving = [i for i in range(1, len(s)) if s[i][1] > s[i - 1][1]]
        if len(moving) < 2:
            return {
                "tokens": 0,
                "cpu_s": float("nan"),
                "wall_s": float("nan"),
                "tok_s": float("nan"),
                "cpu_util": float("nan"),
                "tok_per_cpu_s": float("nan"),
            }
        # the load starts where the counter passes 1 % of the run's tokens: `vllm-locust run`'s preflight streams
        # a few tokens seconds before its workers start, and a window counted from those took in ~1.5 s of
        # worker start-up (imports, spawning: CPU, no tokens), understating our tok/s and tok/CPU-s
        base, total = s[0][1], s[-1][1] - s[0][1]
        start = next(i for i in moving if s[i][1] - base > LOAD_START_FRACTION * total)
        t_first, t_last = s[start - 1][0], s[moving[-1]][0]
        a = next((x for x in s if x[0] >= t_first + skip_s), s[moving[0] - 1])
        b = ([x for x in s if x[0] <= t_last - tail_s] or [s[moving[-1]]])[-1]
        if b[0] <= a[0]:
            a, b = s[moving[0] - 1], s[moving[-1]]
        tokens, cpu, wall = b[1] - a[1], b[2] - a[2], b[0] - a[0]
        return {
            "tokens": tokens,
            "cpu_s": cpu,
            "wall_s": wall,
            "tok_s": tokens / wall,
            "cpu_util": cpu / wall,
            "tok_per_cpu_s": tokens / cpu if cpu > 0 else float("nan"),
        }


# ----------------------------------------------------------------- vllm-locust run
def vllm_locust_cmd() -> list[str]:
    """How to call our CLI (the console script of the venv, else the module)."""
    exe = Path(sys.executable).with_name("vllm-locust")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "orchestration.cli"]


_RUN = [0]


def run_ours(
    host: str,
    *,
    users: int | None = None,
    rate: float | None = None,
    max_concurrency: int | None = None,
    num_prompts: int | None = None,
    run_time: float | None = None,
    workers: int = 1,
    output_len: int = 64,
    input_len: int = 32,
    pin: str | None = str(CLIENT_CPU),
    tag: str = "run",
    sampler: bool = True,
    extra: Sequence[str] = (),
    stats_url: str | None = None,
) -> dict[str, Any]:
    """One `vllm-locust run`; returns result.json, the run dir and the steady-window CPU figures (the simulator's
    token counter read at `stats_url`, default `host`: a gateway in between does not serve /sim/stats)."""
    _RUN[0] += 1
    out_dir = RESULTS / "runs"
    name = f"{tag}-{os.getpid()}-{int(time.time())}-{_RUN[0]}"
    cmd = [
        *vllm_locust_cmd(),
        "run",
        "--host",
        host,
        "--workers",
        str(workers),
        "--output-len",
        str(output_len),
        "--input-len",
        str(input_len),
        "--ignore-eos",
        "--output-dir",
        str(out_dir),
        "--run-name",
        name,
        "--no-report",
        "--quiet",
        "--no-server-metrics",
        *extra,
    ]
    if users is not None:
        cmd += ["--users", str(users)]
    if rate is not None:
        cmd += ["--request-rate", str(rate)]
    if max_concurrency is not None:
        cmd += ["--max-concurrency", str(max_concurrency)]
    if num_prompts is not None:
        cmd += ["--num-prompts", str(num_prompts)]
    if run_time is not None:
        cmd += ["--run-time", f"{int(run_time)}s"]
    if pin is not None and PIN:
        cmd = ["taskset", "-c", pin, *cmd]
    run_dir = out_dir / name
    pids_file = run_dir / "pids.json"
    worker_pids: list[int] = []

    def pids() -> list[int]:
        if not worker_pids and pids_file.exists():
            try:
                worker_pids.extend(json.loads(pids_file.read_text())["workers"])
            except (OSError, ValueError, KeyError):
                pass
        return worker_pids

    smp = Sampler(stats_url or host, pids) if sampler else None
    if smp:
        smp.start()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=(run_time or 60) + 120)
    wall = time.perf_counter() - t0
    if smp:
        smp.stop()
    res_path = run_dir / "result.json"
    if not res_path.exists():
        raise RuntimeError(
            f"vllm-locust run failed ({proc.returncode}): {proc.stderr[-2000:]}{proc.stdout[-1000:]}"
        )
    result = json.loads(res_path.read_text())
    out = {
        "run_dir": str(run_dir),
        "rc": proc.returncode,
        "wall_s": wall,
        "result": result,
        "window": smp.window() if smp else None,
        "cpu_samples": [(t + time.time() - time.perf_counter(), c) for t, _tok, c in smp.samples]
        if smp
        else [],
    }
    return out


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run as dicts of their fields, through the one reader (records.parquet, or an older run's
    records.cols or records.jsonl: vllm_users.measure.records_store)."""
    from dataclasses import asdict

    from vllm_users.measure.records_store import read_request_records

    return [asdict(r) for r in read_request_records(str(run_dir))[0]]


def timing_errors(
    ttfts_ms: Sequence[float],
    itls_ms: Sequence[float],
    ttft_truth: float = TTFT_MS,
    itl_truth: float = ITL_MS,
) -> dict[str, float]:
    """Median / p99 of TTFT and ITL minus the nominal truth, in ms."""
    return {
        "ttft_err_p50_ms": pctl(ttfts_ms, 50) - ttft_truth,
        "ttft_err_p99_ms": pctl(ttfts_ms, 99) - ttft_truth,
        "itl_err_p50_ms": pctl(itls_ms, 50) - itl_truth,
        "itl_err_p99_ms": pctl(itls_ms, 99) - itl_truth,
        "n_ttft": len(ttfts_ms),
        "n_itl": len(itls_ms),
    }


def ours_latencies(run_dir: str) -> tuple[list[float], list[float]]:
    """TTFT and pooled ITL samples (ms) from a run's records, successes only."""
    ttft, itl = [], []
    for r in read_records(run_dir):
        c = r.get("chunk_times_us") or []
        if r.get("error") is not None or not c:
            continue
        ttft.append(c[0] / 1000.0)
        itl += [(b - a) / 1000.0 for a, b in zip(c, c[1:], strict=False)]
    return ttft, itl
