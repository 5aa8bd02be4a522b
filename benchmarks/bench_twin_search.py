"""`--find-max-rate` on real vLLM for CPU and on its twin, the same SLO: how close the twin's answer is.

    .venv/bin/python -m benchmarks.bench_twin_search [--rounds 2] [--steps 8] [--budget 60]

One vLLM for CPU (the e2e tier's tiny model: tests/e2e/vllm_env.py, pinned to the server half of the CPUs).
`vllm-locust calibrate` probes it once; the same SLO search then runs `--rounds` times against vLLM, each round
with its own --seed so that vLLM's prefix cache holds nothing a later round asks for. vLLM is stopped and the twin
(`vllm-locust sim --twin`) takes its CPUs, the load generator keeping its own: the twin's engine is an event
loop, and on the load generator's busy core its steps ran late (up to 1 ms each, a quarter of this server's
4-ms step), which made it slower than its constants. The same searches run against it. Printed: each search's
answer and bracket, the twin's emit lateness, the twin's error against vLLM's answer and against the middle of
vLLM's bracket, next to vLLM's own spread between its rounds. Writes benchmarks/results/twin_search.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import print_table, write_json
from tests.e2e.vllm_env import client_preexec, cpu_split, ensure_vllm, start_vllm_server
from vllm_sim.launch import start_simulator

ROOT = Path(__file__).resolve().parents[1]
SLO = [
    "--find-max-rate",
    "--goodput",
    "ttft:200",
    "tpot:30",
    "--slo-percentile",
    "90",
    "--input-len",
    "1536",
    "--output-len",
    "16",
    "--ignore-eos",
    "--workers",
    "1",
]


def run_cli(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`vllm-locust ARGS` from the repo root, pinned to the load generator's CPUs."""
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        preexec_fn=client_preexec(),
    )


def search(
    target: list[str], steps: int, seed: int, out: Path, timeout: float, slo: list[str] = SLO
) -> dict[str, Any]:
    """One `--find-max-rate` run against `target` (its answer, bracket, steps and verdicts)."""
    t0 = time.monotonic()
    p = run_cli(
        [
            "run",
            *target,
            *slo,
            "--search-steps",
            str(steps),
            "--seed",
            str(seed),
            "--output-dir",
            str(out.parent),
            "--run-name",
            out.name,
            "--output-file",
            str(out / "search.json"),
            "--no-report",
        ],
        timeout,
    )
    doc = json.loads((out / "search.json").read_text()) if (out / "search.json").exists() else {}
    lo, hi = doc.get("max_rate"), doc.get("lowest_failing_rate")
    return {
        "rc": p.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "max_rate": lo,
        "failing": hi,
        "mid": (lo + hi) / 2 if lo and hi else lo,
        "probe": doc.get("probe_capacity_rps"),
        "steps": [
            {
                "target": s.get("target"),
                "verdict": s.get("verdict"),
                "values_ms": (s.get("judgement") or {}).get("slo_values_ms"),
                "reasons": (s.get("judgement") or {}).get("reasons"),
            }
            for s in doc.get("steps", [])
        ],
        "tail": "" if p.returncode == 0 else (p.stdout + p.stderr)[-1500:],
    }


def sim_lateness(url: str, before: dict[str, float] | None = None) -> dict[str, float]:
    """The twin's emit lateness (count, mean and max in seconds; the mean since `before`)."""
    with urllib.request.urlopen(url + "/sim/stats", timeout=10) as resp:
        lat = json.load(resp)["lateness_s"]
    out = {
        "count": float(lat["count"]),
        "sum": float(lat["mean"]) * float(lat["count"]),
        "max": float(lat["max"]),
    }
    if before is not None:
        n = out["count"] - before["count"]
        out = {"count": n, "mean": (out["sum"] - before["sum"]) / n if n else 0.0, "max_ever": out["max"]}
    return out


def summarize(rows: list[dict[str, Any]], server: str = "vllm") -> dict[str, Any]:
    """The twin's mean answer against the server's: errors against its answer and its brackets' middle, and the
    server's own spread between its rounds ({} where either side has no answer)."""
    real = [x for x in rows if x["server"] == server and x["max_rate"]]
    twin = [x for x in rows if x["server"] == "twin" and x["max_rate"]]
    if not real or not twin:
        return {}
    v = statistics.mean(x["max_rate"] for x in real)
    vm = statistics.mean(x["mid"] for x in real)
    t = statistics.mean(x["max_rate"] for x in twin)
    spread = (max(x["max_rate"] for x in real) - min(x["max_rate"] for x in real)) / v
    return {
        f"{server}_max_rate": v,
        f"{server}_bracket_mid": vm,
        "twin_max_rate": t,
        f"error_vs_{server}": t / v - 1,
        f"error_vs_{server}_mid": t / vm - 1,
        f"{server}_spread": spread,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--budget", type=int, default=60, help="calibrate's --budget, seconds")
    ap.add_argument(
        "--num-prompts", type=int, default=0, help="requests per search step (0: the search's own)"
    )
    a = ap.parse_args()
    slo = [*SLO, "--num-prompts", str(a.num_prompts)] if a.num_prompts else SLO
    env = ensure_vllm()
    tmp = Path(tempfile.mkdtemp(prefix="twin-search-"))
    with start_vllm_server(env, env_overrides={"VLLM_SERVER_DEV_MODE": "1"}) as server:
        twin = tmp / "twin.json"
        p = run_cli(
            [
                "calibrate",
                "--host",
                server.url,
                "--model",
                server.model_name,
                "--budget",
                f"{a.budget}s",
                "--max-concurrency",
                "8",
                "--saturation-requests",
                "32",
                "-o",
                str(twin),
            ],
            a.budget + 120,
        )
        print(p.stdout[-4000:], flush=True)
        if p.returncode != 0:
            sys.exit(f"calibrate failed ({p.returncode}): {p.stderr[-500:]}")
        constants = {k: v.get("value") for k, v in json.loads(twin.read_text())["constants"].items()}
        rows: list[dict[str, Any]] = []
        for r in range(a.rounds):
            seed = 100_000 * (r + 1)  # its own prompts: nothing of an earlier round in vLLM's prefix cache
            res = search(
                ["--host", server.url, "--model", server.model_name],
                a.steps,
                seed,
                tmp / f"vllm-{r}",
                900,
                slo,
            )
            rows.append({"server": "vllm", "round": r + 1, **res})
            print(json.dumps(rows[-1]), flush=True)
        model = server.model_name
    with start_simulator(["--twin", str(twin)], cpu=cpu_split()[0][0]) as sim:  # vLLM's CPU, now free
        for r in range(a.rounds):
            before = sim_lateness(sim.url)
            res = search(
                ["--host", sim.url, "--model", model], a.steps, 100_000 * (r + 1), tmp / f"twin-{r}", 900, slo
            )
            rows.append(
                {"server": "twin", "round": r + 1, **res, "sim_lateness_s": sim_lateness(sim.url, before)}
            )
            print(json.dumps(rows[-1]), flush=True)
    summary = summarize(rows)
    print_table(rows, ["server", "round", "probe", "max_rate", "failing", "seconds", "rc"], "find-max-rate")
    print(json.dumps(summary, indent=1))
    path = write_json(
        "twin_search",
        {
            "slo": slo,
            "steps": a.steps,
            "budget_s": a.budget,
            "constants": constants,
            "runs": rows,
            "summary": summary,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
