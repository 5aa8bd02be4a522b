"""A worker's live counts for the master: the progress line, the web UI's LLM tab and find-max-rate's watch read
them while the run goes. The result is computed from the records, never from these."""

from __future__ import annotations

from typing import Any

from vllm_users.measure.histograms import HistogramSet
from vllm_users.measure.metrics import LATE_THRESHOLD_S, Slo
from vllm_users.measure.record import RequestRecord

__all__ = ["LiveTotals"]

_CLASS_COUNTS = ("requests", "completed", "failed", "output_tokens", "good")


class LiveTotals:
    """The run's counts, and per traffic class its counts and histograms (each class judged by its own SLO, as
    per_class.py judges them in the result); records without a class cost nothing here."""

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
        self.class_totals: dict[str, dict[str, int]] = {}
        self.class_hists = HistogramSet()

    def count(self, rec: RequestRecord) -> None:
        """Count one finished record, and in its class when it has one."""
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
            self._count_class(rec, rec.request_class)

    def _count_class(self, rec: RequestRecord, name: str) -> None:
        """A class's live counts, as per_class.py counts them: sent, completed (ok_rows), failed (neither
        completed nor interrupted), output tokens of the completed, good against the class's own SLO."""
        t = self.class_totals.get(name)
        if t is None:
            t = self.class_totals[name] = dict.fromkeys(_CLASS_COUNTS, 0)
        t["requests"] += 1
        if rec.error is None and rec.chunk_times_us:
            t["completed"] += 1
            t["output_tokens"] += rec.output_tokens or 0
            slo = self.class_slos.get(
                name, self.slo
            )  # a class not in the table (a trace's tenant): the run's SLO
            t["good"] += slo is None or slo.met_by(rec)  # no SLO at all: every success is good
            self.class_hists.add_record(rec, name)
        elif rec.error != "interrupted":
            t["failed"] += 1

    def take_class_hists(self) -> HistogramSet:
        """The class histograms gathered since the last call; a fresh set fills from now on."""
        hists, self.class_hists = self.class_hists, HistogramSet()
        return hists

    def snapshot(self) -> dict[str, Any]:
        """A copy of the counts for a batch (the classes' only in runs that have classes)."""
        out = dict(self.totals, errors=dict(self.totals["errors"]))
        if self.class_totals:
            out["classes"] = {k: dict(v) for k, v in self.class_totals.items()}
        return out
