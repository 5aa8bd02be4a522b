"""The Prometheus series of a fleet: per endpoint (several --host URLs) and per replica (--replica-header), request
counters by outcome and one TTFT and one TPOT histogram each, so a dashboard shows which replica was slow.

They stay cheap: only these three families per grouping (the scenario series are not multiplied by endpoint), and
none at all until the run has seen two endpoints (replicas). The groups are result.json's `per_endpoint` /
`per_replica` groups (a replica behind several endpoints is `ENDPOINT REPLICA`), counted by the same definitions,
so the counters end equal to its `completed` and `failed`. Labels carry an endpoint's host:port (never a URL's
credentials) and the replica header's values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from vllm_users.measure.columns import Columns
from vllm_users.measure.groups import rows_by
from vllm_users.measure.metrics import _samples, ok_rows

__all__ = ["FLEET_METRICS", "FleetSeries", "fleet_rows", "is_fleet"]

FLEET_METRICS = ("ttft", "tpot")
# grouping -> (the families' name part, their label)
_GROUPINGS = {"endpoints": ("endpoint", "endpoint"), "replicas": ("replica", "replica")}


class _Hist(Protocol):
    count: int
    sum: float

    def add(self, values: np.ndarray) -> None: ...
    def cumulative(self, le: list[str]) -> list[tuple[str, float]]: ...


def is_fleet(c: Columns) -> bool:
    """Whether any record of `c` names an endpoint or a replica (read from the string tables, not the rows)."""
    return any(v is not None for col in ("host", "replica") for v in c.tables.get(col) or ())


def fleet_rows(c: Columns, sent: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """The sent rows by endpoint and by replica, named as per_endpoint.py names them ({} where none)."""
    hosts = rows_by(c, sent, "host")
    named = rows_by(c, sent, "replica")
    replicas: dict[str, np.ndarray] = {}
    for replica, r in named.items():
        if not hosts:  # one URL: records have no host
            replicas[replica] = r
            continue
        for host, h in hosts.items():
            both = np.intersect1d(r, h, assume_unique=True)
            if both.size:
                replicas[f"{host} {replica}"] = both
    return {"endpoints": hosts, "replicas": replicas}


class FleetSeries:
    """Per endpoint and replica: requests by outcome (ok, failed, interrupted) and TTFT/TPOT histograms."""

    def __init__(self, new_hist: type, edges: dict[str, np.ndarray], le: dict[str, list[str]]) -> None:
        self.new_hist = new_hist  # the exporter's histogram class (its bucket counting)
        self.edges = edges
        self.le = le
        self.requests: dict[str, dict[tuple[str, str], int]] = {g: {} for g in _GROUPINGS}
        self.hists: dict[str, dict[tuple[str, str], _Hist]] = {g: {} for g in _GROUPINGS}

    def observe(self, c: Columns, sent: np.ndarray) -> None:
        """Count a batch's sent rows `sent` into their endpoint's and replica's series."""
        interrupted = c.code("error", "interrupted")
        for grouping, by in fleet_rows(c, sent).items():
            counts, hists = self.requests[grouping], self.hists[grouping]
            for name, rows in by.items():
                ok = ok_rows(c, rows)
                stopped = int((c.a["error"][rows] == interrupted).sum())
                for outcome, n in (("ok", ok.size), ("failed", rows.size - ok.size - stopped)):
                    counts[name, outcome] = counts.get((name, outcome), 0) + int(n)
                if stopped:
                    counts[name, "interrupted"] = counts.get((name, "interrupted"), 0) + stopped
                samples = _samples(c, ok)
                for m in FLEET_METRICS:
                    h = hists.get((m, name))
                    if h is None:
                        h = hists[m, name] = self.new_hist(self.edges[m])
                    h.add(samples[m])

    def groups(self, grouping: str) -> set[str]:
        """The endpoints (replicas) seen so far."""
        return {name for name, _outcome in self.requests[grouping]}

    def collect(self, prefix: str) -> Iterator[Metric]:
        """The families of each grouping with two or more groups; nothing otherwise."""
        for grouping, (part, label) in _GROUPINGS.items():
            if len(self.groups(grouping)) < 2:
                continue
            req = CounterMetricFamily(
                f"{prefix}{part}_requests",
                f"Requests by {part} and outcome (ok, failed, interrupted), as result.json's per_{part}",
                labels=[label, "outcome"],
            )
            for labels, n in sorted(self.requests[grouping].items()):
                req.add_metric(list(labels), n)
            yield req
            for m in FLEET_METRICS:
                hist = HistogramMetricFamily(
                    f"{prefix}{part}_{m}_seconds",
                    f"Client-measured {m.upper()} by {part}, seconds (successful requests)",
                    labels=[label],
                )
                for (metric, name), h in sorted(self.hists[grouping].items()):
                    if metric == m:
                        hist.add_metric([name], h.cumulative(self.le[m]), h.sum)
                yield hist
