"""The run directory's layout: every file a run, a sweep or a report writes, named in this one place.

A run directory (`--output-dir D --run-name X` → `D/X/`) holds what the master and `vllm-locust run` write;
a sweep, an SLO search or `--repeats` directory holds one run directory per step or repeat beside its own
summary file. Every module that reads or writes one of these files takes its name from here.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from vllm_users.errors import UsageError

__all__ = [
    "CLIENT_HEALTH",
    "COLS",
    "COMMAND",
    "EARLY_STOP",
    "EXIT_CODE",
    "GPU_METRICS",
    "GPU_METRICS_MORE",
    "HISTOGRAMS",
    "INTERRUPTED",
    "LOCUSTFILE",
    "LOCUST_CSV",
    "LOCUST_FAILURES",
    "LOCUST_HISTORY",
    "LOCUST_REPORT",
    "LOCUST_STATS",
    "MASTER_INGEST",
    "MASTER_LOG",
    "MASTER_OUT",
    "META",
    "PARQUET",
    "PIDS",
    "PREFLIGHT",
    "PROFILE",
    "PROGRESS",
    "RECORDS",
    "REPEATS",
    "REPORT_DIR",
    "REPORT_HTML",
    "REPORT_JSON",
    "REPORT_MD",
    "REPORT_PDF",
    "RESERVE",
    "RESULT",
    "SERVER_LOG",
    "SERVER_METRICS",
    "SERVER_METRICS_MORE",
    "SPOOL",
    "SWEEP",
    "WEB_REPORT_HTML",
    "WORKER_OUT",
    "WORKERS_DIR",
    "check_writable",
    "gpu_metrics_name",
    "has_records",
    "make_dir",
    "named_dir",
    "path",
    "point_name",
    "read_json",
    "read_json_or_none",
    "repeat_name",
    "server_metrics_name",
    "stamp",
    "step_name",
    "worker_records",
]

# --- one run (written by the master unless said otherwise) ---
RECORDS = "records.jsonl"  # one RequestRecord per line (vllm_users.measure.record)
PARQUET = "records.parquet"  # the same records as one Parquet table (vllm_users.measure.records_store)
SPOOL = (
    "records.arrows"  # while the run goes on: its batches as an Arrow IPC stream, records.parquet at the end
)
COLS = (
    "records.cols"  # runs from before records.parquet: their columns (vllm_users.measure.columns), read only
)
META = "run_meta.json"  # the run's options and what the preflight learned
RESULT = "result.json"  # the typed result (vllm_users.measure.run_result.RunResult)
HISTOGRAMS = "histograms.json"  # the merged HdrHistograms, encoded
CLIENT_HEALTH = "client_health.json"  # workers' CPU and loop lag summary
MASTER_INGEST = "master_ingest.json"  # what the master received from each worker
PROGRESS = "progress.json"  # live progress (requests done, stop reason), rewritten while running
EXIT_CODE = "exit_code.json"  # {"exit_code": N}, the master's verdict
RESERVE = (
    ".end-files-reserve"  # while the master runs: disk room held for the end-of-run files (then removed)
)
PROFILE = "profile.json"  # what --profile did (also the result's `profile` block)
PREFLIGHT = "preflight.json"  # `vllm-locust run`'s preflight (its requests reached the server too)
COMMAND = "command.json"  # the command line and the Locust argv (`vllm-locust run`)
PIDS = "pids.json"  # the master's and workers' process ids (`vllm-locust run`)
EARLY_STOP = "early_stop.json"  # why a step of an SLO search stopped early
INTERRUPTED = "interrupted.json"  # {"signal": "SIGINT"|"SIGTERM"}: `vllm-locust run` was stopped by a signal
SERVER_METRICS = "server_metrics.jsonl"  # the server's /metrics, scraped during the run
# every further --server-metrics URL's scrapes, in the same format (N = 1, 2, ...: the URL's place after the first)
SERVER_METRICS_MORE = "server_metrics.{}.jsonl"
GPU_METRICS = "gpu_metrics.jsonl"  # --gpu-metrics: each GPU exporter's scrapes, per GPU (measure.gpu_samples)
GPU_METRICS_MORE = "gpu_metrics.{}.jsonl"  # every further --gpu-metrics URL's, as SERVER_METRICS_MORE
SERVER_LOG = "server.log"  # sweep-server: the server's own output per configuration
MASTER_LOG = "master.log"  # Locust's log of the master process
LOCUST_REPORT = "locust_report.html"  # Locust's own HTML report
LOCUST_STATS = "locust_stats.csv"  # Locust's CSVs (--csv prefix `locust`)
LOCUST_HISTORY = "locust_stats_history.csv"
LOCUST_FAILURES = "locust_failures.csv"
LOCUST_CSV = "locust"  # the --csv prefix Locust's CSVs above are written under
LOCUSTFILE = "locustfile.py"  # `vllm-locust run`'s generated locustfile (the run's user mix)
MASTER_OUT = "master.out"  # the master process's stdout and stderr (`vllm-locust run`)
WORKER_OUT = "worker-{}.out"  # worker N's stdout and stderr: WORKER_OUT.format(N) (`vllm-locust run`)
WORKERS_DIR = "workers"  # RUN/workers/: each worker process's local copy of its records (worker_records)

# --- a directory of runs ---
SWEEP = "sweep.json"  # a sweep or SLO search: its steps, one run directory each
REPEATS = "repeats.json"  # --repeats: every metric's mean and CI over the repeat directories

# --- reports (`vllm-locust report`, and the one written after a run) ---
REPORT_DIR = "report"  # RUN/report/ holds the report of one run
REPORT_HTML = "report.html"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_PDF = "report.pdf"
WEB_REPORT_HTML = "vllm-locust-report.html"  # the web UI's download name


# --- directory names: a run's, a multi-run's and each of its steps' ---
def stamp() -> str:
    """The local time as a directory name carries it (a run's, a multi-run's or a report's: `20260131-235959`)."""
    return time.strftime("%Y%m%d-%H%M%S")


def named_dir(output_dir: str, run_name: str, label: str) -> str:
    """`output_dir/run_name`, or without a --run-name `output_dir/STAMP-label` (label: the user mix of one run,
    or a multi-run's kind: `sweep`, `search`, `repeats`, `server-sweep`)."""
    return os.path.join(output_dir, run_name or f"{stamp()}-{label}")


def step_name(number: int, what: str) -> str:
    """The directory of a sweep's or a search's step `number` (from 1): `step-03-rate-4.5`, `step-01-probe`."""
    return f"step-{number:02d}-{what}"


def repeat_name(number: int) -> str:
    """The directory of repeat `number` (from 1) of --repeats: `repeat-02`."""
    return f"repeat-{number:02d}"


def point_name(number: int, label: str) -> str:
    """The directory of sweep-server's point `number` (from 1), its parameters in it as far as a name can hold them."""
    return f"point-{number:02d}-" + re.sub(r"[^A-Za-z0-9_.=-]+", "_", label.replace(",", "_"))[:80]


def path(run_dir: str, name: str) -> str:
    """The path of the run file `name` (one of this module's names) in `run_dir`."""
    return os.path.join(run_dir, name)


def server_metrics_name(index: int) -> str:
    """The samples file of the `index`-th --server-metrics URL (0: server_metrics.jsonl, as with one URL)."""
    return SERVER_METRICS if index == 0 else SERVER_METRICS_MORE.format(index)


def gpu_metrics_name(index: int) -> str:
    """The samples file of the `index`-th --gpu-metrics URL (0: gpu_metrics.jsonl)."""
    return GPU_METRICS if index == 0 else GPU_METRICS_MORE.format(index)


def worker_records(worker: str, pid: int) -> str:
    """The name of one worker process's local records file (JSON lines, in WORKERS_DIR or VLLM_LOCUST_WORKER_DIR)."""
    return f"records-{worker}-{pid}.jsonl"


def has_records(run_dir: str) -> bool:
    """Whether `run_dir` holds request records in a file vllm_users.measure.records_store.load_columns reads."""
    return any(os.path.exists(os.path.join(run_dir, f)) for f in (PARQUET, SPOOL, COLS, RECORDS))


def read_json(run_dir: str, name: str) -> Any:
    """The decoded JSON file `name` of `run_dir` (OSError / ValueError when missing or torn)."""
    with open(path(run_dir, name), encoding="utf-8") as fh:
        return json.load(fh)


def read_json_or_none(run_dir: str, name: str) -> Any:
    """The decoded JSON file `name` of `run_dir`, or None when it is missing or does not parse."""
    try:
        return read_json(run_dir, name)
    except (OSError, ValueError):
        return None


def check_writable(directory: str, flag: str = "--output-dir") -> None:
    """Before anything is sent: `directory` (made later, with its parents) must be a directory, or creatable in
    one, that can be written; a UsageError naming the path and the problem otherwise (nothing is created)."""
    p = os.path.abspath(directory)
    while not os.path.exists(p):  # the nearest part that exists decides
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        raise UsageError(f"{flag} {directory}: {p} is a file, not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {directory}: {p} is not writable (permission denied)")


def make_dir(directory: str, flag: str = "--output-dir") -> None:
    """Create `directory` (and its parents) and write a probe file in it: a UsageError naming the path and the
    problem when either fails (a read-only file system, a full disk, a file in the way)."""
    check_writable(directory, flag)
    probe = os.path.join(directory, f".write-check-{os.getpid()}")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(probe, "w") as fh:
            fh.write("ok")
        os.unlink(probe)
    except OSError as e:
        raise UsageError(
            f"{flag} {directory}: cannot write there ({e.strerror or type(e).__name__})"
        ) from None
