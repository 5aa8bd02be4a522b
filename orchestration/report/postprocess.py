"""Post-processor: a run directory (records, result, CSVs, server metric samples) -> one result dict.

Every client metric comes from `vllm_users.measure.metrics` (via `vllm_users.measure.result_builder.build_result`); this
module only chooses the best source available and says what it could not do.
Sources, best first: records (exact; records.parquet, or an older run's file: vllm_users.measure.records_store) > result.json (as the master wrote it) > Locust CSVs
(approximate: Locust rounds response times to ~2 significant digits).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestration.report.locust_csv import result_from_csv
from orchestration.server.metrics_sampler import summarize_file
from vllm_users.atomic import atomic_json
from vllm_users.errors import ReportError  # raised here when a run directory holds nothing reportable
from vllm_users.measure import metric_keys as K
from vllm_users.measure.delivered import shortfall_text
from vllm_users.measure.metrics import Slo, ok_rows, plot_arrays, rows
from vllm_users.measure.records_store import load_columns
from vllm_users.measure.result_builder import build_result
from vllm_users.measure.result_fields import timeseries
from vllm_users.measure.run_result import RUN_FIELDS
from vllm_users.run_dir import CLIENT_HEALTH, LOCUST_STATS, META, RECORDS, REPEATS, RESULT, has_records

__all__ = [
    "MAX_SAMPLE",
    "ReportError",
    "RunData",
    "expand_run_dirs",
    "is_run_dir",
    "load_run",
    "write_json_atomic",
]

# Keys the master adds beside build_result's output, kept when recomputing; the timeline stays in result.json only
RUN_KEYS = tuple(k for k in RUN_FIELDS if k != "timeline")
MAX_SAMPLE = (
    200_000  # values kept per CDF before taking quantiles (plots.cdf_points): tails to p99.99 stay visible
)


@dataclass
class RunData:
    """One run as the report needs it: the result plus the raw samples behind the plots."""

    run_dir: str
    name: str
    result: dict[str, Any]
    source: str  # "records" | "result.json" | "locust_csv"
    approximate: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # seconds, successes: ttft/tpot/e2el; itl is the sample plots.cdf_points draws when larger than MAX_SAMPLE
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    timeseries: dict[str, Any] | None = None
    # start of each success (s from the run's first start), aligned with arrays["ttft"]: start-up effects
    ttft_starts_s: np.ndarray | None = None
    repeat_results: list[dict[str, Any]] | None = None  # a --repeats directory: each repeat's result


def _read_json(path: str, warnings: list[str]) -> dict[str, Any] | None:
    if not os.path.exists(path):
        return None
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        warnings.append(f"{os.path.basename(path)} unreadable ({type(e).__name__}); ignored")
        return None
    return data if isinstance(data, dict) else None


def is_run_dir(path: str) -> bool:
    """True when `path` holds something a report is made from (records, a result, Locust's stats CSV)."""
    return has_records(path) or any(
        os.path.exists(os.path.join(path, f)) for f in (RESULT, LOCUST_STATS, REPEATS)
    )


def expand_run_dirs(paths: Sequence[str]) -> list[str]:
    """The run directories named by `paths`: a run directory as it is; a folder of run directories (the
    `results/` that `vllm-locust run` fills) as the runs inside it, sorted by name (timestamps: oldest
    first, the baseline); anything else as it is (load_run says what is wrong with it)."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p) and not is_run_dir(p):
            inner = sorted(os.path.join(p, d) for d in os.listdir(p) if is_run_dir(os.path.join(p, d)))
            if inner:
                out.extend(inner)
                continue
        out.append(p)
    return out


def load_run(run_dir: str, *, slo: Slo | None = None) -> RunData:
    """Read a run directory into RunData; raises ReportError when it holds nothing reportable."""
    if not os.path.isdir(run_dir):
        raise ReportError(f"run directory {run_dir!r} does not exist or is not a directory")
    warnings: list[str] = []
    meta = _read_json(os.path.join(run_dir, META), warnings) or {}
    written = _read_json(os.path.join(run_dir, RESULT), warnings)
    if not meta and written:
        meta = dict(written.get("meta") or {}, **{k: written.get(k) for k in ("model_id", "date", "backend")})
    if slo is None and meta.get("goodput"):
        try:
            slo = Slo.parse([meta["goodput"]])
        except ValueError as e:
            warnings.append(f"run_meta goodput ignored: {e}")
    name = os.path.basename(os.path.normpath(run_dir))
    run: RunData | None = None
    if has_records(run_dir):
        # records.parquet (older runs: records.cols, or records.jsonl converted once): the records, columnar
        cols = load_columns(run_dir)
        warnings.extend(cols.warnings)
        if cols.torn_lines:
            warnings.append(f"{cols.torn_lines} torn or unparseable record line(s) skipped (killed master?)")
        if cols.n:
            res = build_result(cols, meta, slo=slo)
            for k in RUN_KEYS:
                if written and k in written and k not in res:
                    res[k] = written[k]
            short = shortfall_text(res.get(K.DELIVERY))
            if short:  # the run's own words (its result's warnings), beside the report's tables
                warnings.append("load " + short)
            run = RunData(run_dir, name, res, "records", warnings=warnings)
            # ITL arrives as the very subsample the CDF plot would draw (the full array is ~1 GB at 1 M records)
            run.arrays = plot_arrays(cols, MAX_SAMPLE)
            run.timeseries = timeseries(cols)
            ok_starts = cols.a["t_start"][ok_rows(cols, rows(cols))]
            run.ttft_starts_s = (
                ok_starts - float(np.nanmin(cols.a["t_start"])) if ok_starts.size else ok_starts
            )
        else:
            warnings.append(f"{RECORDS} holds no request records (empty run)")
    if run is None and written is not None:
        run = RunData(run_dir, name, written, RESULT, warnings=warnings)
        warnings.append(f"no request records: figures come from {RESULT}; no CDFs or time series")
    if run is None:
        csv = result_from_csv(run_dir, meta)
        if csv is not None:
            res, approximate, ts, csv_warn = csv
            run = RunData(
                run_dir, name, res, "locust_csv", approximate=approximate, warnings=warnings + csv_warn
            )
            run.timeseries = ts
            warnings.append("no records: figures come from Locust's CSVs (see approximate fields)")
    if run is None:
        raise ReportError(
            f"{run_dir}: no {RECORDS}, {RESULT} or {LOCUST_STATS} to report from, and no run "
            "directories inside it"
        )
    if "client_health" not in run.result:
        health = _read_json(os.path.join(run_dir, CLIENT_HEALTH), run.warnings)
        if health:
            run.result["client_health"] = health
            run.result.setdefault("client_bound", health.get("client_bound"))
    server = summarize_file(run_dir, run.result)
    if server is not None:
        run.result["server_metrics"] = server
        if not server.get("available") or not server.get("vllm_metrics"):
            run.warnings.append(f"server metrics: {server.get('reason', 'unavailable')}")
    if run.approximate:
        run.result["approximate_fields"] = run.approximate
    if run.warnings:
        run.result["report_warnings"] = list(run.warnings)
    return run


def write_json_atomic(path: str, data: Any) -> None:
    """Write JSON through a temporary file so a reader never sees half a file."""
    atomic_json(path, data, default=_json_default)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)
