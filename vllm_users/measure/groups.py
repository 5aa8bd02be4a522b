"""Figures of one grouping of a run's records (traffic classes, served models): per group its counts, throughput,
shares of the completed requests and output tokens, TTFT/TPOT/ITL/E2EL statistics and goodput against the group's
SLO, all on the run's common duration so the groups' rates add up to the run's.

`per_class.py` and `per_model.py` are the two groupings; each says which rows form a group and which SLO judges
it, and adds what only it knows (a class's weight and fairness, a model's share of the mix).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import Columns
from vllm_users.measure.metrics import Slo, duration_s, ok_rows, or_zero
from vllm_users.measure.result_fields import compute_metrics

__all__ = ["GROUP_METRICS", "GROUP_PERCENTILES", "Group", "group_figures", "rows_by"]

GROUP_PERCENTILES = (50.0, 90.0, 99.0)  # always in a group's figures, beside the run's --metric-percentiles
GROUP_METRICS = ("ttft", "tpot", "itl", "e2el")  # the latency metrics a group's figures hold


@dataclass(frozen=True)
class Group:
    """One group: its rows (sent requests of the measured window) and the SLO that judges it (None: none)."""

    rows: np.ndarray
    slo: Slo | None = None


def rows_by(c: Columns, idx: np.ndarray, column: str, none_as: str | None = None) -> dict[str, np.ndarray]:
    """The rows of `idx` by the value of the string column `column`, in the order values first appear; rows without
    a value go to `none_as` (None: left out). Names that meet (a value equal to `none_as`) share one group."""
    if column not in c.a or not idx.size:
        return {none_as: idx} if none_as is not None and idx.size else {}
    codes = c.a[column][idx]
    out: dict[str, list[np.ndarray]] = {}
    for k in np.unique(codes).tolist():
        name = c.tables[column][int(k)] if k >= 0 else None
        key = none_as if name is None else str(name)
        if key is not None:
            out.setdefault(key, []).append(idx[codes == k])
    return {k: np.sort(np.concatenate(v)) if len(v) > 1 else v[0] for k, v in out.items()}


def group_figures(
    c: Columns,
    idx: np.ndarray,
    groups: Mapping[str, Group],
    *,
    percentiles: Sequence[float] = (),
    success_is_good: bool = False,
) -> tuple[float, dict[str, dict[str, Any]]]:
    """(the duration of `idx`, name -> the group's figures) for each of `groups` (rows within `idx`).

    A group's latency figures are there only where it has successes (absent, never 0). Its goodput fields are
    there only where it has an SLO, unless `success_is_good` (a traffic class: with no SLO every success is good,
    its goodput is its request throughput)."""
    dur = duration_s(c, idx) or 1e-9
    pcs = tuple(sorted({*GROUP_PERCENTILES, *percentiles}))
    ok_all = ok_rows(c, idx)
    total_ok = max(int(ok_all.size), 1)
    total_out = max(int(or_zero(c.a["output_tokens"][ok_all]).sum()), 1)
    out: dict[str, dict[str, Any]] = {}
    for name, g in groups.items():
        m = compute_metrics(
            c, g.rows, slo=g.slo, percentiles=pcs, percentile_metrics=GROUP_METRICS, duration=dur
        )
        ok = ok_rows(c, g.rows)
        entry: dict[str, Any] = {
            "requests": int(g.rows.size),
            K.COMPLETED: m[K.COMPLETED],
            K.FAILED: m[K.FAILED],
            K.REQUEST_THROUGHPUT: m[K.REQUEST_THROUGHPUT],
            K.OUTPUT_THROUGHPUT: m[K.OUTPUT_THROUGHPUT],
            "request_share": int(ok.size) / total_ok,
            "output_token_share": int(or_zero(c.a["output_tokens"][ok]).sum()) / total_out,
        }
        if g.slo is not None or success_is_good:
            good = m[K.GOODPUT]["good"] if g.slo is not None else int(ok.size)
            entry.update(
                slo_ms=dict(g.slo.limits_ms) if g.slo is not None else {},
                good=good,
                good_fraction=good / ok.size if ok.size else None,
                request_goodput=good / dur,
            )
            if g.slo is not None and g.slo.require_valid:
                entry["good_latency_only"] = m[K.GOODPUT]["good_latency_only"]
                entry["invalid"] = m[K.GOODPUT]["invalid"]
        if ok.size:  # latency figures only where the group has successes (absent, never 0)
            entry.update(
                {f: v for f, v in m.items() if f.endswith("_ms") and f.split("_")[1] in GROUP_METRICS}
            )
        out[name] = entry
    return dur, out
