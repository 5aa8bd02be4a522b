"""Labelled runs: live runs against the embedded simulator made with a known cause, recorded as small fixtures.

Each case names its cause, the runs that show it (`vllm-locust run` arguments, the simulator's among them) and
the findings the diagnosis must give on them: exactly those, so a rule that fires where the cause is absent (a
false finding) or stays silent where it is present (a missed cause) fails tests/unit/report/test_labelled_runs.py.
A fixture (tests/data/diagnosis/LABEL.json) holds what the diagnosis reads of each run as the report loads it:
the result (without its timeline) and the TTFT of each success with its start. Regenerate them with

    python -m tests.labelled_runs [LABEL ...]

(a few seconds of simulator per run). The cases of a saturated client CPU and a busy machine are labels only
(`HOOKS`) here: they need a load generator or machine made busy on purpose, which these runs do not do; their
recorded cases are tests/data/health_cases.json (tests/unit/measure/test_client_verdict.py), made by
tests/integration/core/health_scenarios.py.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FIXTURES = Path(__file__).parent / "data" / "diagnosis"
BASE = ("--workers", "1", "--input-len", "32", "--output-len", "16", "--quiet", "--no-report")
RUN_TIMEOUT_S = 180
TRACE_FILE = "trace.jsonl"  # a case's mooncake trace, written beside its runs (TRACE in its arguments)
TRACE = "{trace}"
COMPARED = ("tpot", "itl", "e2el")  # per-request samples a comparison of single runs tests (TTFT: ttft_s)
GPU = "{gpu}"  # a fake DCGM exporter of the case's `gpu` profile (tests/fake_dcgm.py), started for its runs


@dataclass(frozen=True)
class Case:
    """A known cause, the runs that show it and the (rule, run) findings the diagnosis must give on them."""

    label: str
    cause: str
    runs: tuple[tuple[str, tuple[str, ...]], ...]
    expected: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    gpu: str | None = None  # the profile the fake exporter at GPU serves (busy, throttled, idle)


SHARED_PREFIX = ("--prefix-len", "256", "--cache-rate", "1", "--num-prefixes", "2")
CASES: tuple[Case, ...] = (
    Case(
        "healthy",
        "nothing wrong: random prompts, a server with room",
        (("healthy", ("--users", "4", "--num-prompts", "80")),),
    ),
    Case(
        "saturated",
        "the server's batch is full (--max-num-seqs 2): four times the users, the same throughput",
        (
            ("c2", ("--users", "2", "--num-prompts", "60", "--sim-args=--max-num-seqs 2")),
            ("c8", ("--users", "8", "--num-prompts", "120", "--sim-args=--max-num-seqs 2")),
        ),
        frozenset({("throughput_plateau", "c8")}),
    ),
    Case(
        "cache_off",
        "prompts share a 256-token prefix, the server's prefix cache is off",
        (
            (
                "cache-off",
                (
                    "--users",
                    "4",
                    "--num-prompts",
                    "80",
                    *SHARED_PREFIX,
                    "--sim-args=--no-enable-prefix-caching",
                ),
            ),
        ),
        frozenset({("prefix_cache_low", "cache-off")}),
    ),
    Case(
        "cache_on",
        "prompts share a 256-token prefix and the server caches it",
        (("cache-on", ("--users", "4", "--num-prompts", "80", *SHARED_PREFIX)),),
    ),
    Case(
        "trace_at_ceiling",
        "a mooncake trace replayed with prefix caching on: the hit rate is the trace's own ceiling",
        (("trace", ("--trace", TRACE, "--trace-block-size", "128", "--ignore-eos", "--time-scale", "2")),),
    ),
    Case(
        "trace_cache_off",
        "the same trace against a server whose prefix cache is off",
        (
            (
                "trace-off",
                (
                    "--trace",
                    TRACE,
                    "--trace-block-size",
                    "128",
                    "--ignore-eos",
                    "--time-scale",
                    "2",
                    "--sim-args=--no-enable-prefix-caching",
                ),
            ),
        ),
        frozenset({("prefix_cache_low", "trace-off")}),
    ),
    Case(
        "multiturn_cache_on",
        "conversations resend their history and the server caches it",
        (
            (
                "multiturn",
                ("--scenario", "multi-turn", "--users", "4", "--num-prompts", "64", "--num-turns", "4"),
            ),
        ),
    ),
    Case(
        "multiturn_cache_off",
        "conversations resend their history, the server's prefix cache is off",
        (
            (
                "multiturn-off",
                (
                    "--scenario",
                    "multi-turn",
                    "--users",
                    "4",
                    "--num-prompts",
                    "64",
                    "--num-turns",
                    "4",
                    "--sim-args=--no-enable-prefix-caching",
                ),
            ),
        ),
        frozenset({("prefix_cache_low", "multiturn-off")}),
    ),
    Case(
        "startup_tail",
        "every user's first long prefill at once: the TTFT tail is the start-up burst, not the steady state",
        (
            (
                "startup",
                (
                    "--users",
                    "16",
                    "--spawn-rate",
                    "1000",
                    "--num-prompts",
                    "160",
                    "--input-len",
                    "500",
                    "--output-len",
                    "256",
                    "--range-ratio",
                    "0.9",
                    "--sim-args=--no-enable-prefix-caching",
                ),
            ),
        ),
        frozenset({("ttft_startup", "startup")}),
    ),
    Case(
        "slo_missed",
        "a 5 ms TTFT SLO on a server whose TTFT is about 20 ms",
        (("slo", ("--users", "4", "--num-prompts", "80", "--goodput", "ttft:5")),),
        frozenset({("slo_miss", "slo")}),
    ),
    Case(
        "api_server_bound",
        "80 ms before each request reaches the engine, outside its histograms (the simulator's delayed headers): "
        "the time vLLM's API server takes under load",
        (
            (
                "api-server",
                (
                    "--users",
                    "4",
                    "--num-prompts",
                    "60",
                    "--sim-args=--fault-rate-delay-headers 1 --fault-delay-ms 80",
                ),
            ),
        ),
        frozenset({("api_server_bound", "api-server")}),
    ),
    Case(
        "engine_queue_bound",
        "one sequence at a time for eight users (--max-num-seqs 1): the TTFT is the engine's queue, inside its "
        "histograms",
        (("engine-queue", ("--users", "8", "--num-prompts", "64", "--sim-args=--max-num-seqs 1")),),
    ),
    Case(
        "regression",
        "the same load against a server whose engine step takes 12 ms instead of 8: B is slower, significantly",
        (
            ("base", ("--users", "4", "--num-prompts", "80")),
            ("slow", ("--users", "4", "--num-prompts", "80", "--sim-args=--decode-step-ms 12")),
        ),
        frozenset({("significant_regression", "slow")}),
    ),
    Case(
        "identical_pair",
        "the same load against the same server twice: no regression",
        (
            ("first", ("--users", "4", "--num-prompts", "80")),
            ("second", ("--users", "4", "--num-prompts", "80")),
        ),
    ),
    Case(
        "gpu_busy",
        "nothing wrong, the GPU busy and unthrottled (a DCGM exporter at 95 % utilisation)",
        (("gpu-busy", ("--users", "4", "--num-prompts", "80", "--gpu-metrics", GPU)),),
        gpu="busy",
    ),
    Case(
        "gpu_throttled",
        "the GPU at its power cap (clock-event reason 0x4 at every scrape)",
        (("gpu-throttled", ("--users", "4", "--num-prompts", "80", "--gpu-metrics", GPU)),),
        frozenset({("gpu_throttled_power", "gpu-throttled")}),
        gpu="throttled",
    ),
    Case(
        "gpu_idle_api_bound",
        "one API-server process at 20 ms a request (50 req/s) under 60 req/s: the requests queue before the "
        "engine, the GPU idles (12 %) while the TTFT grows",
        (
            (
                "gpu-idle",
                (
                    "--request-rate",
                    "60",
                    "--num-prompts",
                    "90",
                    "--gpu-metrics",
                    GPU,
                    "--sim-args=--api-server-count 1 --api-request-cost-us 20000",
                ),
            ),
        ),
        frozenset({("gpu_idle_ttft_grows", "gpu-idle"), ("api_server_bound", "gpu-idle")}),
        gpu="idle",
    ),
    Case(
        "no_stream",
        "answers read as one body (--no-stream): one body per answer is no packing of tokens",
        (("no-stream", ("--users", "4", "--num-prompts", "80", "--no-stream")),),
    ),
)
# causes whose runs this module does not make (a load generator or a machine made busy on purpose): their labels
HOOKS: dict[str, str] = {
    "client_cpu_saturated": "client_bound",
    "machine_busy": "machine_busy",  # not our client: never "client_bound"
}


def write_trace(path: Path, n: int = 40, seed: int = 5, gap_ms: int = 150, block: int = 128) -> None:
    """Four prefix chains that most requests extend, each request with 3-5 blocks of its own: a ceiling under 50 %."""
    rng = random.Random(seed)
    rows, unique = [], 10_000
    for i in range(n):
        chain = [100 * (i % 4) + k for k in range(rng.randint(2, 6))]
        own = list(range(unique, unique + rng.randint(3, 5)))
        unique += len(own)
        ids = chain + own
        rows.append(
            {
                "timestamp": i * gap_ms,
                "input_length": len(ids) * block - rng.randint(0, block - 1),
                "output_length": 4,
                "hash_ids": ids,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run_case(case: Case, out: Path) -> list[str]:
    """The case's runs, live, into `out`; their directories."""
    from tests.fake_dcgm import serve

    trace = out / TRACE_FILE
    dirs = []
    for name, args in case.runs:
        if TRACE in args and not trace.exists():
            write_trace(trace)
        url, stop = serve(case.gpu) if case.gpu else ("", lambda: None)
        argv = [a.replace(TRACE, str(trace)).replace(GPU, url) for a in args]
        cmd = [sys.executable, "-m", "orchestration.cli", "run", "--output-dir", str(out), "--run-name", name]
        try:
            p = subprocess.run([*cmd, *BASE, *argv], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        finally:
            stop()
        d = out / name
        if not (d / "result.json").exists():
            raise RuntimeError(
                f"{case.label}/{name}: no result.json (exit {p.returncode}): {p.stderr[-2000:]}"
            )
        dirs.append(str(d))
    return dirs


def _rounded(a: np.ndarray | None) -> list[float] | None:
    return None if a is None else [round(float(v), 6) for v in a]


def record(case: Case, dirs: list[str]) -> dict[str, Any]:
    """The fixture of a case's runs: what the diagnosis reads of each, as the report loads it."""
    from orchestration.report.postprocess import load_run

    runs = []
    for (name, args), d in zip(case.runs, dirs, strict=True):
        run = load_run(d)
        result = {k: v for k, v in run.result.items() if k != "timeline"}
        runs.append(
            {
                "name": name,
                "args": [a for a in args if a not in (TRACE, GPU)],
                "result": result,
                "ttft_s": _rounded(run.arrays.get("ttft")),
                "ttft_starts_s": _rounded(run.ttft_starts_s),
                "arrays_s": {m: _rounded(run.arrays.get(m)) for m in COMPARED if m in run.arrays},
            }
        )
    return {"label": case.label, "cause": case.cause, "runs": runs}


def load_fixture(data: dict[str, Any]) -> list[Any]:
    """The runs of a fixture as the diagnosis takes them."""
    from orchestration.report.postprocess import RunData

    out = []
    for r in data["runs"]:
        arrays = {m: np.asarray(v, dtype=float) for m, v in (r.get("arrays_s") or {}).items()}
        if r.get("ttft_s") is not None:
            arrays["ttft"] = np.asarray(r["ttft_s"], dtype=float)
        starts = None if r.get("ttft_starts_s") is None else np.asarray(r["ttft_starts_s"], dtype=float)
        out.append(
            RunData(
                f"/labelled/{r['name']}",
                r["name"],
                r["result"],
                "records",
                arrays=arrays,
                ttft_starts_s=starts,
            )
        )
    return out


def fired(runs: list[Any]) -> set[tuple[str, str]]:
    """(rule, run) of every finding the diagnosis gives on these runs, informational ones included."""
    from orchestration.report.diagnose import diagnose

    return {(f.rule, f.run) for f in diagnose(runs)}


def main(argv: list[str]) -> int:
    """Run the named cases (all without names), write their fixtures, print what fired against what was expected."""
    by_label = {c.label: c for c in CASES}
    unknown = [a for a in argv if a not in by_label]
    if unknown:
        print(
            f"labelled_runs: error: unknown case {unknown[0]!r} (cases: {', '.join(by_label)})",
            file=sys.stderr,
        )
        return 2
    FIXTURES.mkdir(parents=True, exist_ok=True)
    bad = 0
    for case in [by_label[a] for a in argv] or list(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            data = record(case, run_case(case, Path(tmp)))
        path = FIXTURES / f"{case.label}.json"
        path.write_text(json.dumps(data, indent=None, sort_keys=True) + "\n")
        got = fired(load_fixture(data))
        ok = got == set(case.expected)
        bad += not ok
        print(
            f"{case.label}: {'ok' if ok else 'MISMATCH'} fired {sorted(got)} expected {sorted(case.expected)} -> {path}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", os.getcwd())
    sys.exit(main(sys.argv[1:]))
