"""Run the whole benchmark suite; each script prints its table and writes benchmarks/results/NAME.json.

    python benchmarks/run_all.py [--quick] [--only capacity,fidelity] [--skip peers]

--quick: one repetition and short runs (a smoke test of the suite, minutes); without it, 3 repetitions
(2 for scale-out), medians reported (about 30-40 minutes on the 2-core dev machine).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# name -> (script, full args, quick args)
SUITE: dict[str, tuple[str, list[str], list[str]]] = {
    "capacity": ("bench_client_capacity.py", [], ["--quick"]),
    "fidelity": ("bench_fidelity.py", [], ["--quick"]),
    "open_loop": ("bench_open_loop.py", [], ["--quick"]),
    "peers": ("bench_peers.py", [], ["--quick"]),
    "scaleout": ("bench_scaleout.py", [], ["--quick"]),
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


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks one after another (they must not overlap: they pin cores)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated names: " + ",".join(SUITE))
    ap.add_argument("--skip", default="")
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
        print(f"\n##### {n}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.time()
        rc = subprocess.call(cmd, cwd=HERE.parent)
        status[n] = (rc, time.time() - t0)
    print("\n##### summary")
    for n, (rc, dt) in status.items():
        print(f"  {n:<12} {'ok' if rc == 0 else f'FAILED rc={rc}':<14} {dt:6.0f} s")
    return 0 if all(rc == 0 for rc, _ in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
