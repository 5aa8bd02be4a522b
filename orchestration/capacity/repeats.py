"""`--repeats N`: the same run N times (one run directory each), every metric's mean with a 95 % CI.

Layout: `D/repeat-01 … repeat-NN` (ordinary run directories) and `D/repeats.json`, which `vllm-locust
report` recognises: a repeated run then compares by Welch's t-test over its repeats.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from orchestration.capacity.run_hooks import RunOne
from orchestration.capacity.stats import mean_ci
from orchestration.capacity.steps import parent_dir, shared_host, step_args
from orchestration.report.compare import _value, metric_names
from orchestration.report.postprocess import REPEATS_FILE, RunData, load_run
from vllm_users import exit_codes
from vllm_users.atomic import atomic_json
from vllm_users.measure.run_result import load_result
from vllm_users.options import Options

# Printed after the repeats (every metric is in repeats.json and the report).
SUMMARY_METRICS = ("request_throughput", "output_throughput", "request_goodput", "median_ttft_ms", "p99_ttft_ms",
                   "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "median_e2el_ms", "p99_e2el_ms")  # fmt: skip


def is_repeats_dir(path: str) -> bool:
    """True for a directory written by --repeats."""
    return os.path.exists(os.path.join(path, REPEATS_FILE))


def repeat_dirs(path: str) -> list[str]:
    """The repeat run directories listed in a repeats directory, in order."""
    with open(os.path.join(path, REPEATS_FILE)) as fh:
        doc = json.load(fh)
    return [os.path.join(path, d) for d in doc["runs"]]


def aggregate(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """metric -> mean, 95 % CI (t-distribution), std, n and the values, over the repeats' results."""
    out: dict[str, dict[str, Any]] = {}
    for name in metric_names(results):
        vals = [_value(r, name) for r in results]
        present = [v for v in vals if v is not None]
        if present:
            out[name] = {**mean_ci(present).to_dict(), "values": vals}
    return out


def run_repeats(a: Options, run_one: RunOne) -> int:
    """Run `a` a.repeats times into one directory and write repeats.json; returns the worst exit code."""
    n = int(a.repeats)
    base = parent_dir(a, "repeats", REPEATS_FILE)
    worst, names = 0, []
    with shared_host(a) as host:  # one server for every repeat: the repeats differ only by chance
        for i in range(1, n + 1):
            b = step_args(a, host, base, f"repeat-{i:02d}", repeats=1)
            print(f"vllm-locust: repeat {i}/{n}", flush=True)
            code = run_one(b)
            worst = max(worst, code)
            names.append(b.run_name)
            if code == exit_codes.INTERRUPTED:
                break  # Ctrl-C: no further repeat; the ones that ran are aggregated
    results = []
    for d in names:
        res = load_result(os.path.join(base, d))
        if res is not None:
            results.append(res.to_json())
        else:
            print(f"vllm-locust: warning: {d} wrote no result; left out of the repeats", flush=True)
    doc = {"repeats": n, "runs": names, "confidence": 0.95, "metrics": aggregate(results) if results else {}}
    atomic_json(os.path.join(base, REPEATS_FILE), doc)
    print(format_repeats(doc, base), flush=True)
    if not a.no_report:
        from orchestration.report.cli import report_after_run

        report_after_run(base)
    return worst


def format_repeats(doc: dict[str, Any], path: str) -> str:
    """The headline metrics as mean ± 95 % CI half-width over the repeats."""
    lines = [f"{' Over ' + str(doc['repeats']) + ' repeats (mean ± 95 % CI) ':=^66}"]
    for name in SUMMARY_METRICS:
        m = doc["metrics"].get(name)
        if m:
            hw = "n/a" if m["ci_half_width"] is None else f"{m['ci_half_width']:.4g}"
            lines.append(f"{name:<28}{m['mean']:>14.4g} ± {hw:<10} (n={m['n']})")
    lines.append(f"Repeats: {os.path.join(path, REPEATS_FILE)}")
    return "\n".join(lines)


def load_repeats(path: str) -> RunData:
    """A repeats directory as one RunData: means as the result, per-request samples pooled, per-repeat results kept."""
    runs = [load_run(d) for d in repeat_dirs(path)]
    if not runs:
        raise ValueError(f"{path}: no repeat could be read")
    results = [r.result for r in runs]
    agg = aggregate(results)
    res: dict[str, Any] = {k: v for k, v in runs[0].result.items() if not isinstance(v, int | float) or isinstance(v, bool)}
    for name, m in agg.items():
        res[name] = m["mean"]
    res["repeats"] = {"n": len(runs), "runs": [r.run_dir for r in runs], "metrics": agg}
    data = RunData(path, os.path.basename(os.path.normpath(path)), res, runs[0].source,
                   warnings=[w for r in runs for w in r.warnings])  # fmt: skip
    data.arrays = {k: np.concatenate([r.arrays[k] for r in runs if k in r.arrays]) for k in runs[0].arrays}
    data.timeseries = runs[0].timeseries
    data.repeat_results = results
    return data
