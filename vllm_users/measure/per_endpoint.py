"""Per-endpoint and per-replica results (a fleet: several --host URLs, or replicas behind one router that say who
answered with --replica-header): each one's requests, throughput, TTFT/TPOT/ITL/E2EL statistics, goodput (with
--goodput) and errors by kind, and how uneven the fleet was (`imbalance`).

A record's endpoint is `RequestRecord.host` (None against one URL), its replica `RequestRecord.replica` (None
without --replica-header, or when the answer carried no such header: those are counted, not grouped). With fewer
than two endpoints (replicas) there is no block: result.json has no `per_endpoint` (`per_replica`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import Columns, Records, as_columns
from vllm_users.measure.groups import Group, group_figures, rows_by
from vllm_users.measure.metrics import Slo, rows, sent_rows

__all__ = ["imbalance", "per_endpoint", "per_replica"]


def imbalance(figures: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """How uneven the groups were: max/min of their request share and of their median TTFT, and which groups
    those are. A ratio is None where it does not apply (a group with no success: its share is 0, its TTFT absent;
    `idle` names those)."""
    shares = {n: float(f.get("request_share") or 0.0) for n, f in figures.items()}
    ttft = {n: f[K.TTFT.key("median")] for n, f in figures.items() if f.get(K.TTFT.key("median")) is not None}
    out: dict[str, Any] = {"idle": [n for n, s in shares.items() if s == 0.0]}
    for key, vals in (("request_share", shares), ("median_ttft", ttft)):
        if len(vals) < 2:
            out[f"{key}_max_over_min"] = None
            continue
        hi, lo = max(vals, key=vals.__getitem__), min(vals, key=vals.__getitem__)
        out[f"{key}_max_over_min"] = vals[hi] / vals[lo] if vals[lo] > 0 else None
        out[f"{key}_max"], out[f"{key}_min"] = hi, lo
    return out


def _errors(c: Columns, idx: np.ndarray) -> dict[str, int]:
    """Failed requests of `idx` by error kind (interrupted ones are not failures)."""
    by = rows_by(c, idx, "error")
    return {k: int(v.size) for k, v in by.items() if k != "interrupted"}


def _block(
    c: Columns,
    idx: np.ndarray,
    by: Mapping[str, np.ndarray],
    names: Sequence[str],
    slo: Slo | None,
    percentiles: Sequence[float],
) -> dict[str, Any]:
    groups = {n: Group(by.get(n, idx[:0]), slo) for n in names}
    dur, figures = group_figures(c, idx, groups, percentiles=percentiles)
    for n, g in groups.items():
        figures[n][K.ERRORS_BY_KIND] = _errors(c, g.rows)
    return {K.DURATION: dur, "groups": figures, "imbalance": imbalance(figures)}


def per_endpoint(
    records: Records,
    idx: np.ndarray | None,
    meta: Mapping[str, Any],
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = (),
) -> dict[str, Any] | None:
    """result.json's `per_endpoint` for the measured rows `idx`: the endpoints' figures (the run's --host order,
    then any other seen; an endpoint that got nothing is there with 0 requests) and their imbalance; None when
    the run sent to one endpoint."""
    c = as_columns(records)
    idx = sent_rows(c, rows(c, idx))
    by = rows_by(c, idx, "host")
    names = list(dict.fromkeys([*(str(e) for e in meta.get("endpoints") or ()), *by]))
    if len(names) < 2:
        return None
    return _block(c, idx, by, names, slo, percentiles)


def per_replica(
    records: Records,
    idx: np.ndarray | None,
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = (),
) -> dict[str, Any] | None:
    """result.json's `per_replica` for the measured rows `idx`: the replicas' figures by --replica-header's value
    (with several endpoints: `ENDPOINT REPLICA`), their imbalance, and `unnamed`: requests whose answer named no
    replica (a refused connection has no header); None when fewer than two replicas answered."""
    c = as_columns(records)
    idx = sent_rows(c, rows(c, idx))
    named = rows_by(c, idx, "replica")
    if not named:
        return None
    by: dict[str, np.ndarray] = {}
    hosts = rows_by(c, idx, "host")
    for replica, r in named.items():
        if len(hosts) < 2:
            by[replica] = r
            continue
        for host, h in hosts.items():
            both = np.intersect1d(r, h, assume_unique=True)
            if both.size:
                by[f"{host} {replica}"] = both
    if len(by) < 2:
        return None
    out = _block(c, idx, by, sorted(by), slo, percentiles)
    out["unnamed"] = int(idx.size) - sum(int(v.size) for v in by.values())
    return out
