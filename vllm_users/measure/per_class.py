"""Per-class results (traffic classes share one server: did each get what its weight asked?): each traffic class's requests, throughput, latency percentiles and goodput
against its own SLO, the share of the capacity it got against its weight, and Jain's fairness index of the
weight-normalised goodput over the classes.

The class table comes from the run's meta (`classes`: the --class list as dicts, written by the master); a
record's class is `RequestRecord.request_class`. A class with no SLO of its own is judged by --goodput's; with
neither, every success counts as good (its goodput is its request throughput). A class seen in the records but not
in the table (a trace's tenant) has weight 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import Records, as_columns
from vllm_users.measure.metrics import Slo, duration_s, ok_rows, or_zero, rows, sent_rows
from vllm_users.measure.result_fields import compute_metrics

__all__ = [
    "CLASS_METRICS",
    "CLASS_PERCENTILES",
    "class_misses",
    "class_slo",
    "class_table",
    "jain_index",
    "per_class",
]

CLASS_PERCENTILES = (50.0, 90.0, 99.0)  # always in a class's figures, beside the run's --metric-percentiles
CLASS_METRICS = ("ttft", "tpot", "e2el")


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one takes all; None when there
    are no values or all are 0 (nobody got anything: fairness is undefined)."""
    x = np.asarray(values, dtype=np.float64)
    sq = float((x * x).sum())
    if x.size == 0 or sq == 0.0:
        return None
    return float(x.sum() ** 2 / (x.size * sq))


def class_slo(spec: Mapping[str, Any], run_slo: Slo | None) -> Slo | None:
    """The SLO a class is judged by: its own limits (ttft/tpot/e2el), else the run's --goodput; None: no SLO."""
    own = {k: float(spec[k]) for k in CLASS_METRICS if spec.get(k) is not None}
    valid = run_slo.require_valid if run_slo is not None else False
    if own:
        return Slo(own, valid)
    return run_slo


def per_class(
    records: Records,
    idx: np.ndarray | None,
    table: Sequence[Mapping[str, Any]],
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = (),
) -> dict[str, Any] | None:
    """The `classes` block of result.json for the measured rows `idx`; None when no request has a class and the
    run named none."""
    c = as_columns(records)
    idx = sent_rows(c, rows(c, idx))
    codes = c.a["request_class"][idx] if "request_class" in c.a else np.full(idx.size, -1)
    names_seen = {c.tables["request_class"][int(k)] for k in np.unique(codes)} if idx.size else set()
    names_seen.discard(None)
    specs = {str(t["name"]): t for t in table}
    for name in sorted(n for n in names_seen if n not in specs):  # type: ignore[type-var]
        specs[str(name)] = {"name": name, "weight": None}
    if not specs:
        return None
    dur = duration_s(c, idx) or 1e-9
    pcs = tuple(sorted({*CLASS_PERCENTILES, *percentiles}))
    ok_all = ok_rows(c, idx)
    total_ok = max(int(ok_all.size), 1)
    total_out = max(int(or_zero(c.a["output_tokens"][ok_all]).sum()), 1)
    weights = {n: float(s.get("weight") or 1.0) for n, s in specs.items()}
    wsum = sum(weights.values())
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        k = c.code("request_class", name)
        mine = idx[codes == k] if k >= 0 else idx[:0]
        cslo = class_slo(spec, slo)
        m = compute_metrics(
            c, mine, slo=cslo, percentiles=pcs, percentile_metrics=CLASS_METRICS, duration=dur
        )
        ok = ok_rows(c, mine)
        good = m[K.GOODPUT]["good"] if cslo is not None else int(ok.size)
        entry: dict[str, Any] = {
            "weight": spec.get("weight"),
            "weight_share": weights[name] / wsum,
            "requests": int(mine.size),
            K.COMPLETED: m[K.COMPLETED],
            K.FAILED: m[K.FAILED],
            K.REQUEST_THROUGHPUT: m[K.REQUEST_THROUGHPUT],
            K.OUTPUT_THROUGHPUT: m[K.OUTPUT_THROUGHPUT],
            "request_share": int(ok.size) / total_ok,
            "output_token_share": int(or_zero(c.a["output_tokens"][ok]).sum()) / total_out,
            "slo_ms": dict(cslo.limits_ms) if cslo is not None else {},
            "good": good,
            "good_fraction": good / ok.size if ok.size else None,
            "request_goodput": good / dur,
        }
        for key in ("scenario", "model", "priority"):
            if spec.get(key) is not None:
                entry[key] = spec[key]
        if cslo is not None and cslo.require_valid:
            entry["good_latency_only"] = m[K.GOODPUT]["good_latency_only"]
            entry["invalid"] = m[K.GOODPUT]["invalid"]
        if ok.size:  # latency figures only where the class has successes (absent, never 0)
            entry.update(
                {f: v for f, v in m.items() if f.endswith("_ms") and f.split("_")[1] in CLASS_METRICS}
            )
        out[name] = entry
    x = [out[n]["request_goodput"] / weights[n] for n in out]
    return {
        "duration": dur,
        "per_class": out,
        "fairness": {
            "jain_index": jain_index(x),
            "of": "request_goodput / weight",
            "values": dict(zip(out, x, strict=True)),
        },
        "unclassed": int((codes == c.code("request_class", None)).sum()) if table else 0,
    }


def class_table(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The class table a run's meta holds (none: [])."""
    t = meta.get("classes")
    return [dict(x) for x in t] if isinstance(t, list) else []


def class_misses(block: Mapping[str, Any] | None, pname: str = "p99") -> list[tuple[str, str]]:
    """(class, why) for each class whose `pname` (e.g. p99) of an SLO metric is above its limit, or that sent
    requests and completed none; in the table's order (the --find-max-rate search and the diagnosis use it)."""
    out: list[tuple[str, str]] = []
    for name, c in ((block or {}).get("per_class") or {}).items():
        for m, lim in (c.get("slo_ms") or {}).items():
            v = c.get(f"{pname}_{m}_ms")
            if v is None and c.get("requests"):
                out.append((name, f"no {m} samples ({c.get('failed', 0)} failed)"))
                break
            if v is not None and v > lim:
                out.append((name, f"{pname} {m.upper()} {v:.1f} ms > {lim:g} ms"))
                break
    return out
