"""Run the whole benchmark suite; each script prints its table and writes benchmarks/results/NAME.json.

    python benchmarks/run_all.py [--quick] [--repeats N] [--only capacity,fidelity] [--skip peers]

--quick: one repetition and short runs (a smoke test of the suite, minutes); without it, 3 repetitions
(2 for scale-out), medians reported (about 30-40 minutes on the 2-core dev machine). --repeats N: N
repetitions of every script that repeats (the peers interleaved with ours in each). At the end, the generated
section of docs/benchmarks.md (median and spread of every figure, the machine's CPU model and ISA) is rewritten
from benchmarks/results/*.json (--no-docs leaves the page alone).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from bench_summary import render, update_page

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# name -> (script, full args, quick args)
SUITE: dict[str, tuple[str, list[str], list[str]]] = {
    "capacity": ("bench_client_capacity.py", [], ["--quick"]),
    "fidelity": ("bench_fidelity.py", [], ["--quick"]),
    "open_loop": ("bench_open_loop.py", [], ["--quick"]),
    "peers": ("bench_peers.py", [], ["--quick"]),
    "scaleout": ("bench_scaleout.py", [], ["--quick"]),
    "master": ("bench_master.py", [], ["--workers", "8,32", "--seconds", "8"]),
    "simulator": (
        "bench_simulator.py",
        ["--output", str(RESULTS / "simulator.json")],
        ["--duration", "5", "--output", str(RESULTS / "simulator.json")],
    ),
    "postprocess": (
        "bench_postprocess.py",
        ["--output", str(RESULTS / "postprocess.json")],
        ["--records", "100000", "--output", str(RESULTS / "postprocess.json")],
    ),
}


REPEATABLE = ("capacity", "fidelity", "open_loop", "peers", "scaleout")


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks one after another (they must not overlap: they pin cores)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated names: " + ",".join(SUITE))
    ap.add_argument("--skip", default="")
    ap.add_argument("--repeats", type=int, default=0, help="repetitions per figure (scripts with --reps)")
    ap.add_argument(
        "--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md's generated section"
    )
    a = ap.parse_args(argv)
    names = [n for n in (a.only.split(",") if a.only else SUITE) if n and n not in a.skip.split(",")]
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; choose from {list(SUITE)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    status = {}
    for n in names:
        script, full, quick = SUITE[n]
        cmd = [sys.executable, str(HERE / script), *(quick if a.quick else full)]
        if a.repeats and n in REPEATABLE:
            cmd = [c for c in cmd if c != "--quick"] + ["--reps", str(a.repeats)]
        print(f"\n##### {n}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.time()
        rc = subprocess.call(cmd, cwd=HERE.parent)
        status[n] = (rc, time.time() - t0)
    if not a.no_docs:
        page = HERE.parent / "docs" / "benchmarks.md"
        update_page(page, render(RESULTS))
        print(f"\nrewrote the generated section of {page}")
    print("\n##### summary")
    for n, (rc, dt) in status.items():
        print(f"  {n:<12} {'ok' if rc == 0 else f'FAILED rc={rc}':<14} {dt:6.0f} s")
    return 0 if all(rc == 0 for rc, _ in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
