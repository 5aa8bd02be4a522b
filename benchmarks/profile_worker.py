"""Profile one worker under load: py-spy samples the worker process of a `vllm-locust run` (relative shares).

    python benchmarks/profile_worker.py [--mode burst|segment] [--streams 256] [--seconds 8] [--out PREFIX]

Writes PREFIX.txt (py-spy's raw collapsed stacks) and prints the top self/inclusive frames; the simulator
is pinned to core 0 and the client to core 1 like every benchmark (common.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench_client_capacity import LOADS
from common import RESULTS, run_ours, start_sim


def summarize(collapsed: Path, top: int = 30) -> str:
    """Self and inclusive shares per function from py-spy's collapsed stacks."""
    incl: collections.Counter[str] = collections.Counter()
    self_: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        k = int(n)
        total += k
        frames = [
            f.split(" (")[0] + " " + f.split("/")[-1].rstrip(")") if "(" in f else f for f in stack.split(";")
        ]
        for f in set(frames):
            incl[f] += k
        self_[frames[-1]] += k
    out = [f"samples: {total}", "-- inclusive --"]
    out += [f"{100 * v / total:5.1f}%  {f}" for f, v in incl.most_common(top)]
    out += ["-- self --"]
    out += [f"{100 * v / total:5.1f}%  {f}" for f, v in self_.most_common(top)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run the load, profile the worker for --seconds after a warm-up, print the summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="burst")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--out", default=str(RESULTS / "profile"))
    ap.add_argument("--extra", default="", help="extra flags for vllm-locust run")
    a = ap.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    cfg = LOADS[(a.mode, a.streams)]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    with start_sim(cfg["itl_ms"], cfg["ttft_ms"], cfg["extra"]) as sim:
        th = threading.Thread(
            target=lambda: result.update(
                run_ours(
                    sim.url,
                    users=a.streams,
                    run_time=a.seconds + 14,
                    workers=1,
                    tag="profile",
                    extra=a.extra.split() if a.extra else (),
                )
            )
        )
        th.start()
        pids_file = None
        deadline = time.time() + 30
        while time.time() < deadline:
            runs = sorted((RESULTS / "runs").glob("profile-*/pids.json"), key=lambda p: p.stat().st_mtime)
            if runs and runs[-1].stat().st_mtime > time.time() - 30:
                pids_file = runs[-1]
                break
            time.sleep(0.2)
        assert pids_file is not None, "no pids.json"
        pid = json.loads(pids_file.read_text())["workers"][0]
        time.sleep(8)
        subprocess.run(
            [
                spy,
                "record",
                "-p",
                str(pid),
                "-r",
                str(a.rate),
                "-d",
                str(int(a.seconds)),
                "-f",
                "raw",
                "-o",
                str(out.with_suffix(".txt")),
                "--nonblocking",
            ],
            check=False,
        )
        th.join()
    w = result.get("window") or {}
    print(f"tok/CPU-s {w.get('tok_per_cpu_s', float('nan')):.0f}, CPU {w.get('cpu_util', float('nan')):.0%}")
    s = summarize(out.with_suffix(".txt"))
    out.with_suffix(".summary.txt").write_text(s)
    print(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
