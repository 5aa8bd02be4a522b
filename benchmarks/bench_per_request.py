"""Per-request CPU of the record path, this checkout against another (A/B in one process, interleaved).

What a worker does per finished request beyond its chunks: build the RequestRecord, add it to the
histograms, serialise it (JSON line), pack it into the batch's columns. CPU time (process_time) per request,
median of --rounds interleaved rounds of --n requests with 64 chunks each:

    python benchmarks/bench_per_request.py [--other /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path


def load(root: str) -> dict:
    """The record-path functions of the checkout at `root` (fresh module objects)."""
    for m in [k for k in sys.modules if k.startswith("vllm_users")]:
        del sys.modules[m]
    sys.path.insert(0, root)
    try:
        rec = importlib.import_module("vllm_users.measure.record")
        hist = importlib.import_module("vllm_users.measure.histograms")
        cols = importlib.import_module("vllm_users.measure.columns")
    finally:
        sys.path.remove(root)
    return {"Record": rec.RequestRecord, "HistogramSet": hist.HistogramSet, "pack": cols.pack_records}


def one_round(impl: dict, n: int, chunks: int) -> dict[str, float]:
    """CPU µs per request for each step."""
    R, HS = impl["Record"], impl["HistogramSet"]
    base = [50_000 + 10_000 * i for i in range(chunks)]
    out: dict[str, float] = {}
    t = time.process_time()
    recs = [
        R(
            scenario="chat",
            worker="w",
            user=i,
            seq=i,
            endpoint="chat",
            t_start=1.7e9 + i,
            chunk_times_us=[x + (i % 7) for x in base],
            end_us=base[-1] + 100,
            prompt_tokens=32,
            output_tokens=chunks,
            output_len=chunks,
            input_len=32,
            status=200,
            finish_reason="length",
        )
        for i in range(n)
    ]
    out["build"] = time.process_time() - t
    hs = HS()
    t = time.process_time()
    for r in recs:
        hs.add_record(r)
    hs.encode()  # what the batch sends (the lazy version records here)
    out["histograms"] = time.process_time() - t
    t = time.process_time()
    lines = [r.to_json() for r in recs]
    out["json"] = time.process_time() - t
    t = time.process_time()
    impl["pack"](recs)
    out["columns"] = time.process_time() - t
    assert len(lines) == n
    return {k: v / n * 1e6 for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    """Interleave rounds of this checkout and --other; print the medians."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", default="", help="another checkout's root (e.g. an export of main)")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    roots = {"this": str(Path(__file__).resolve().parents[1])}
    if a.other:
        roots["other"] = a.other
    impls = {k: load(v) for k, v in roots.items()}
    res: dict[str, list[dict[str, float]]] = {k: [] for k in impls}
    for _ in range(a.rounds):
        for k, impl in impls.items():
            res[k].append(one_round(impl, a.n, a.chunks))
    for k, rounds in res.items():
        med = {s: statistics.median(r[s] for r in rounds) for s in rounds[0]}
        print(
            f"{k:6s} "
            + "  ".join(f"{s} {v:6.1f} µs" for s, v in med.items())
            + f"  total {sum(med.values()):6.1f} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
