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
from vllm_users.measure.groups import GROUP_PERCENTILES, Group, group_figures, rows_by
from vllm_users.measure.metrics import Slo, rows, sent_rows

__all__ = [
    "CLASS_METRICS",
    "CLASS_PERCENTILES",
    "class_misses",
    "class_slo",
    "class_table",
    "jain_index",
    "per_class",
]

CLASS_PERCENTILES = GROUP_PERCENTILES  # always in a class's figures, beside the run's --metric-percentiles
CLASS_METRICS = (
    "ttft",
    "tpot",
    "e2el",
)  # the metrics a class's SLO may name (its figures add ITL: groups.py)


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
    by = rows_by(c, idx, "request_class")
    specs = {str(t["name"]): t for t in table}
    for name in sorted(n for n in by if n not in specs):
        specs[name] = {"name": name, "weight": None}
    if not specs:
        return None
    groups = {n: Group(by.get(n, idx[:0]), class_slo(s, slo)) for n, s in specs.items()}
    dur, figures = group_figures(c, idx, groups, percentiles=percentiles, success_is_good=True)
    weights = {n: float(s.get("weight") or 1.0) for n, s in specs.items()}
    wsum = sum(weights.values())
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        entry: dict[str, Any] = {"weight": spec.get("weight"), "weight_share": weights[name] / wsum}
        entry.update(figures[name])
        for key in ("scenario", "model", "priority"):
            if spec.get(key) is not None:
                entry[key] = spec[key]
        out[name] = entry
    x = [out[n][K.REQUEST_GOODPUT] / weights[n] for n in out]
    classed = sum(int(g.rows.size) for g in groups.values())
    return {
        K.DURATION: dur,
        "per_class": out,
        "fairness": {
            "jain_index": jain_index(x),
            "of": "request_goodput / weight",
            "values": dict(zip(out, x, strict=True)),
        },
        "unclassed": int(idx.size) - classed if table else 0,
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
                out.append((name, f"no {m} samples ({c.get(K.FAILED, 0)} failed)"))
                break
            if v is not None and v > lim:
                out.append((name, f"{pname} {m.upper()} {v:.1f} ms > {lim:g} ms"))
                break
    return out
