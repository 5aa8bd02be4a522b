"""A worker's live counts for the master: the progress line, the web UI's LLM tab and find-max-rate's watch read
them while the run goes. The result is computed from the records, never from these.

Besides the run's totals, records are counted by groupings (`GROUPINGS`): traffic class, endpoint (several --host
URLs) and replica (--replica-header). Each grouping keeps the same counts and histograms per group; a record that
has no value for a grouping (one URL, no classes, no replica header) costs nothing there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm_users.measure.histograms import HistogramSet
from vllm_users.measure.metrics import LATE_THRESHOLD_S, Slo
from vllm_users.measure.record import RequestRecord

__all__ = ["GROUPINGS", "Grouping", "LiveTotals", "replica_key"]

GROUP_COUNTS = ("requests", "completed", "failed", "output_tokens", "good")
GROUPINGS = ("classes", "endpoints", "replicas")  # the snapshot's keys, in a batch's totals


def replica_key(host: str | None, replica: str | None) -> str | None:
    """A record's replica as per_replica names it: the --replica-header value, `ENDPOINT REPLICA` with several
    endpoints (one URL's records have no host); None without a replica."""
    if replica is None:
        return None
    return replica if host is None else f"{host} {replica}"


class Grouping:
    """Live counts and histograms per group of one grouping, as the result's per-group figures count them: sent,
    completed (a success with output), failed (neither completed nor interrupted), output tokens of the completed,
    and good (`good(rec, group)` of the completed)."""

    def __init__(self, good: Callable[[RequestRecord, str], bool]) -> None:
        self.good = good
        self.totals: dict[str, dict[str, int]] = {}
        self.hists = HistogramSet()

    def count(self, rec: RequestRecord, name: str) -> None:
        """Count one finished (not dropped) record in group `name`."""
        t = self.totals.get(name)
        if t is None:
            t = self.totals[name] = dict.fromkeys(GROUP_COUNTS, 0)
        t["requests"] += 1
        if rec.error is None and rec.chunk_times_us:
            t["completed"] += 1
            t["output_tokens"] += rec.output_tokens or 0
            t["good"] += self.good(rec, name)
            self.hists.add_record(rec, name, itl=False)  # the live rows show TTFT, TPOT and E2EL: no ITL
        elif rec.error != "interrupted":
            t["failed"] += 1

    def take_hists(self) -> HistogramSet:
        """The histograms gathered since the last call; a fresh set fills from now on."""
        hists, self.hists = self.hists, HistogramSet()
        return hists


class LiveTotals:
    """The run's counts, and per traffic class, endpoint and replica their counts and histograms (a class judged
    by its own SLO, as per_class.py judges it; an endpoint or replica by the run's)."""

    def __init__(self, slo: Slo | None, class_slos: dict[str, Slo | None]) -> None:
        self.slo = slo
        self.class_slos = class_slos
        self.totals: dict[str, Any] = {
            "ok": 0,
            "failed": 0,
            "output_tokens": 0,
            "e2el_sum_s": 0.0,  # the successes' end-to-end latencies added up: their mean, live (search's watch)
            "good": 0,
            "sent": 0,
            "late": 0,
            "dropped": 0,
            "errors": {},
        }
        self.groupings: dict[str, Grouping] = {
            "classes": Grouping(self._class_good),
            "endpoints": Grouping(self._run_good),
            "replicas": Grouping(self._run_good),
        }

    def _class_good(self, rec: RequestRecord, name: str) -> bool:
        slo = self.class_slos.get(
            name, self.slo
        )  # a class not in the table (a trace's tenant): the run's SLO
        return slo is None or slo.met_by(rec)  # no SLO at all: every success is good

    def _run_good(self, rec: RequestRecord, _name: str) -> bool:
        return self.slo is not None and self.slo.met_by(rec)

    @property
    def class_totals(self) -> dict[str, dict[str, int]]:
        """Per traffic class: its live counts ({} in a run without classes)."""
        return self.groupings["classes"].totals

    def count(self, rec: RequestRecord) -> None:
        """Count one finished record, and in its class, endpoint and replica where it has them."""
        t = self.totals
        if rec.error == "dropped":
            t["dropped"] += 1
            return
        if rec.t_intended is not None:
            t["sent"] += 1
            t["late"] += rec.t_start - rec.t_intended > LATE_THRESHOLD_S
        if rec.error is None:
            t["ok"] += 1
            t["output_tokens"] += rec.output_tokens or 0
            t["e2el_sum_s"] += rec.end_us / 1e6
            t["good"] += self.slo is not None and self.slo.met_by(rec)
        else:
            t["failed"] += 1
            t["errors"][rec.error] = t["errors"].get(rec.error, 0) + 1
        if rec.request_class is not None:
            self.groupings["classes"].count(rec, rec.request_class)
        if rec.host is not None:
            self.groupings["endpoints"].count(rec, rec.host)
        replica = replica_key(rec.host, rec.replica)
        if replica is not None:
            self.groupings["replicas"].count(rec, replica)

    def take_hists(self) -> dict[str, HistogramSet]:
        """Per grouping that has counts: its histograms gathered since the last call (fresh sets fill from now)."""
        return {k: g.take_hists() for k, g in self.groupings.items() if g.totals}

    def snapshot(self) -> dict[str, Any]:
        """A copy of the counts for a batch (a grouping's only in runs that have it: classes, several endpoints,
        replicas named by --replica-header)."""
        out = dict(self.totals, errors=dict(self.totals["errors"]))
        for key, g in self.groupings.items():
            if g.totals:
                out[key] = {k: dict(v) for k, v in g.totals.items()}
        return out
