"""Directories of runs as the report reads them: a sweep or an SLO search (`sweep.json`, one run directory per
step) and a `--repeats` directory (`repeats.json`, one run directory per repeat).

orchestration.capacity writes these directories and reads them back through this module; the report reads them
only through it, so the report never imports the code that runs sweeps. From capacity/ it takes only its
statistics (report.stats, which imports nothing of ours).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from orchestration.report.compare import _value, metric_names
from orchestration.report.postprocess import RunData, load_run
from orchestration.report.stats import mean_ci
from vllm_users.run_dir import REPEATS, SWEEP, path, read_json

__all__ = [
    "aggregate",
    "is_repeats_dir",
    "is_sweep_dir",
    "load_repeats",
    "load_sweep",
    "repeat_dirs",
    "search_headline",
]


# ------------------------------------------------------------------------------------- sweeps and searches
def is_sweep_dir(run_set: str) -> bool:
    """True for a directory written by --sweep, --find-max-rate or sweep-server (it holds sweep.json)."""
    return os.path.exists(path(run_set, SWEEP))


def load_sweep(run_set: str) -> dict[str, Any]:
    """sweep.json of a sweep directory."""
    return dict(read_json(run_set, SWEEP))


def _range_line(r: dict[str, Any] | None) -> list[str]:
    """The answer's statistical range (capacity/search_range.py) in a sentence; an end it cannot pin said so."""
    if not r:
        return []

    def end(v: Any, word: str) -> str:
        return f"{v:.3g}" if isinstance(v, int | float) else f"not pinned ({word})"

    return [
        f"Range a second search lands in: [{end(r.get('low'), 'too few steps below')}, "
        f"{end(r.get('high'), 'too few steps above')}) req/s: each step's SLO percentile over its sample size "
        f"({r.get('confidence', 0):.1%} a step); more requests a step (--num-prompts) narrow it."
    ]


def search_headline(doc: dict[str, Any]) -> list[str]:
    """The answer of an SLO search (sweep.json of kind max_rate_search) in one or two sentences."""
    slo = (
        " ".join(f"{k}:{v:g}ms" for k, v in doc["slo_ms"].items()) or "each class's own"
    )  # --class SLOs only
    pct = doc["slo_percentile"]
    lo, hi = doc.get("max_rate"), doc.get("lowest_failing_rate")
    n = len(doc["steps"])
    if lo is None:
        who = (
            [f"First class to miss its SLO: {', '.join(doc['limiting_classes'])}."]
            if doc.get("limiting_classes")
            else []
        )
        return [
            f"No tried rate held the SLO ({slo} at p{pct:g}); the lowest tried was {hi:g} req/s ({n} steps).",
            *who,
        ]
    if hi is None:
        return [f"Max rate >= {lo:g} req/s: every tried rate held the SLO ({slo} at p{pct:g}; {n} steps)."]
    lines = [
        f"Max rate within the SLO ({slo} at p{pct:g}, failures <= {doc['max_error_rate']:.1%}): {lo:g} req/s "
        f"(search resolution: held at {lo:g}, failed at {hi:g}, [{lo:g}, {hi:g}) +{(hi - lo) / lo:.1%}; {n} steps).",
        *_range_line(doc.get("range")),
    ]
    if doc.get("limiting_classes"):  # traffic classes: which class missed its SLO first
        lines.append(f"First class to miss its SLO (at {hi:g} req/s): {', '.join(doc['limiting_classes'])}.")
    c = (doc.get("cost") or {}).get("at_slo_max_rate")
    if c and c.get("usd_per_million_output_tokens") is not None:
        lines.append(
            f"At that rate: ${c['usd_per_million_output_tokens']:.4g} per million output tokens, "
            f"${c['usd_per_request']:.4g} per request (${doc['cost']['gpu_hour_price_usd']:g}/GPU-hour x "
            f"{doc['cost']['gpus']})."
        )
    return lines


# ------------------------------------------------------------------------------------- repeats
def is_repeats_dir(run_set: str) -> bool:
    """True for a directory written by --repeats (it holds repeats.json)."""
    return os.path.exists(path(run_set, REPEATS))


def repeat_dirs(run_set: str) -> list[str]:
    """The repeat run directories listed in a repeats directory, in order."""
    doc = read_json(run_set, REPEATS)
    return [os.path.join(run_set, d) for d in doc["runs"]]


def aggregate(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """metric -> mean, 95 % CI (t-distribution), std, n and the values, over the repeats' results."""
    out: dict[str, dict[str, Any]] = {}
    for name in metric_names(results):
        vals = [_value(r, name) for r in results]
        present = [v for v in vals if v is not None]
        if present:
            out[name] = {**mean_ci(present).to_dict(), "values": vals}
    return out


def load_repeats(run_set: str) -> RunData:
    """A repeats directory as one RunData: means as the result, per-request samples pooled, per-repeat results kept."""
    runs = [load_run(d) for d in repeat_dirs(run_set)]
    if not runs:
        raise ValueError(f"{run_set}: no repeat could be read")
    results = [r.result for r in runs]
    agg = aggregate(results)
    res: dict[str, Any] = {
        k: v for k, v in runs[0].result.items() if not isinstance(v, int | float) or isinstance(v, bool)
    }
    for name, m in agg.items():
        res[name] = m["mean"]
    res["repeats"] = {"n": len(runs), "runs": [r.run_dir for r in runs], "metrics": agg}
    data = RunData(
        run_set,
        os.path.basename(os.path.normpath(run_set)),
        res,
        runs[0].source,
        warnings=[w for r in runs for w in r.warnings],
    )
    data.arrays = {k: np.concatenate([r.arrays[k] for r in runs if k in r.arrays]) for k in runs[0].arrays}
    data.timeseries = runs[0].timeseries
    data.repeat_results = results
    return data
