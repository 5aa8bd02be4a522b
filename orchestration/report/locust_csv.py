"""What Locust's CSVs allow when there are no request records (a plain `locust --csv` run).

Locust rounds response times to ~2 significant digits and prints integer percentiles, has no
population std, and counts requests/s over its own elapsed time: those fields are listed as
approximate. Our plugin fires exactly one request per LLM request, of type STREAM: its response time is
E2EL and its content size is the output tokens. Runs before that also fired TTFT and TPOT rows; they
still map to vLLM's names. Other request types are treated as whole requests (E2EL).
"""

from __future__ import annotations

import csv
import os
from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.run_dir import LOCUST_FAILURES, LOCUST_HISTORY, LOCUST_STATS

__all__ = ["read_csv_rows", "result_from_csv"]

PCTS = {"50": "50%", "90": "90%", "95": "95%", "99": "99%"}
TYPE_METRIC = {"STREAM": "e2el", "TTFT": "ttft", "TPOT": "tpot", "ITL": "itl"}


def read_csv_rows(path: str) -> tuple[list[dict[str, str]], int]:
    """CSV rows as dicts; rows of the wrong width (a torn last line) are skipped and counted."""
    rows: list[dict[str, str]] = []
    bad = 0
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            return [], 0
        for row in reader:
            if len(row) != len(header):
                bad += 1
                continue
            rows.append(dict(zip(header, row, strict=True)))
    return rows, bad


def _num(text: str | None) -> float | None:
    try:
        v = float(text) if text not in (None, "", "N/A") else None
    except ValueError:
        return None
    return v


def result_from_csv(
    run_dir: str, meta: dict[str, Any]
) -> tuple[dict[str, Any], list[str], dict[str, Any] | None, list[str]] | None:
    """(result, approximate field names, time series, warnings) from the CSVs; None without a stats CSV."""
    path = os.path.join(run_dir, LOCUST_STATS)
    if not os.path.exists(path):
        return None
    warnings: list[str] = []
    rows, bad = read_csv_rows(path)
    if bad:
        warnings.append(f"{LOCUST_STATS}: {bad} torn or malformed line(s) skipped")
    rows = [r for r in rows if r.get("Name") != "Aggregated" and _num(r.get("Request Count")) is not None]
    if not rows:
        warnings.append(f"{LOCUST_STATS} has no request rows")
    by_metric: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_metric.setdefault(TYPE_METRIC.get(r.get("Type", ""), "e2el"), []).append(r)
    streams = by_metric.get("e2el", [])
    total = sum(_num(r["Request Count"]) or 0 for r in streams)
    failed = sum(_num(r["Failure Count"]) or 0 for r in streams)
    rps = sum(_num(r.get("Requests/s")) or 0 for r in streams)
    res: dict[str, Any] = {
        "date": meta.get("date"),
        "backend": meta.get("backend", "locust"),
        "model_id": meta.get("model_id"),
        "tokenizer_id": meta.get("tokenizer_id"),
        "num_prompts": int(total),
        "request_rate": meta.get("request_rate") or "inf",
        "burstiness": meta.get("burstiness", 1.0),
        "max_concurrency": meta.get("max_concurrency"),
        K.COMPLETED: int(total - failed),
        K.FAILED: int(failed),
        K.REQUEST_THROUGHPUT: rps * (total - failed) / total if total else 0.0,
        K.DURATION: (total / rps) if rps else None,
        K.TOTAL_INPUT_TOKENS: None,
        K.TOTAL_OUTPUT_TOKENS: None,
        K.OUTPUT_THROUGHPUT: None,
        **_output_tokens(streams, rps, total),
        K.REQUEST_GOODPUT: None,
        "tool": "vllm-locust",
        "source": "locust_csv",
    }
    approximate = [K.DURATION, K.REQUEST_THROUGHPUT, K.OUTPUT_THROUGHPUT]
    for metric, group in by_metric.items():
        n = sum(_num(r["Request Count"]) or 0 for r in group)
        if not n:
            continue
        # Request-weighted over rows (names); exact for one row, which is the common case.
        mean = (
            sum((_num(r["Average Response Time"]) or 0) * (_num(r["Request Count"]) or 0) for r in group) / n
        )
        res[f"mean_{metric}_ms"] = mean
        res[f"std_{metric}_ms"] = None
        big = max(group, key=lambda r: _num(r["Request Count"]) or 0)
        for p, col in PCTS.items():
            res[f"p{p}_{metric}_ms"] = _num(big.get(col))
            approximate.append(f"p{p}_{metric}_ms")
        res[f"median_{metric}_ms"] = _num(big.get("Median Response Time"))
        approximate += (
            [f"median_{metric}_ms", f"mean_{metric}_ms"] if len(group) > 1 else [f"median_{metric}_ms"]
        )
    if streams and not any(r.get("Type") == "STREAM" for r in streams):
        warnings.append(
            "plain Locust rows: response times are time-to-headers for streamed responses, not E2EL"
        )
    res[K.ERRORS_BY_KIND] = _failures(run_dir, warnings)
    return res, approximate, _history(run_dir, warnings), warnings


def _output_tokens(streams: list[dict[str, str]], rps: float, total: float) -> dict[str, Any]:
    """STREAM rows carry output tokens as their content size (Locust averages it over all requests)."""
    ours = [r for r in streams if r.get("Type") == "STREAM"]
    if not ours or not total:
        return {}
    tokens = sum((_num(r.get("Average Content Size")) or 0) * (_num(r["Request Count"]) or 0) for r in ours)
    out: dict[str, Any] = {K.TOTAL_OUTPUT_TOKENS: round(tokens)}
    if rps:
        out[K.OUTPUT_THROUGHPUT] = tokens / (total / rps)
    return out


def _failures(run_dir: str, warnings: list[str]) -> dict[str, int]:
    path = os.path.join(run_dir, LOCUST_FAILURES)
    if not os.path.exists(path):
        return {}
    rows, bad = read_csv_rows(path)
    if bad:
        warnings.append(f"{LOCUST_FAILURES}: {bad} torn line(s) skipped")
    out: dict[str, int] = {}
    for r in rows:
        key = (r.get("Error") or "error")[:80]
        out[key] = out.get(key, 0) + int(_num(r.get("Occurrences")) or 0)
    return out


def _history(run_dir: str, warnings: list[str]) -> dict[str, Any] | None:
    """Aggregated rows of the stats history as a time series (Locust's 1-s samples, cumulative percentiles)."""
    path = os.path.join(run_dir, LOCUST_HISTORY)
    if not os.path.exists(path):
        return None
    rows, bad = read_csv_rows(path)
    if bad:
        warnings.append(f"{LOCUST_HISTORY}: {bad} torn line(s) skipped")
    agg = [r for r in rows if r.get("Name") == "Aggregated" and _num(r.get("Timestamp")) is not None]
    if not agg:
        return None
    t0 = float(agg[0]["Timestamp"])
    nan = float("nan")
    return {
        "t0": t0,
        "bucket_s": 1.0,
        "t": [float(r["Timestamp"]) - t0 for r in agg],
        "completed_per_s": [_num(r.get("Requests/s")) or 0.0 for r in agg],
        "failed_per_s": [_num(r.get("Failures/s")) or 0.0 for r in agg],
        "inflight": [_num(r.get("User Count")) or 0.0 for r in agg],  # users, the closest Locust has
        "ttft_p50_ms": [nan for _ in agg],
        "ttft_p99_ms": [nan for _ in agg],
        "e2el_p50_ms": [_num(r.get("50%")) or nan for r in agg],
        "e2el_p99_ms": [_num(r.get("99%")) or nan for r in agg],
        "approximate": True,
    }
