"""Exact latency distributions: one HdrHistogram (µs, 3 significant digits) per scenario x metric.

Workers encode them into their reports; the master decodes and adds them, which is lossless.
"""

from __future__ import annotations

from typing import Any

from hdrh.histogram import HdrHistogram

from vllm_users.measure.metrics import tpot_s
from vllm_users.measure.record import RequestRecord

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
HIST_METRICS = ("ttft", "tpot", "itl", "e2el")


def new_histogram() -> HdrHistogram:
    """An empty histogram with the project's range and precision."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


class HistogramSet:
    """Histograms keyed by (scenario, metric); successes only."""

    def __init__(self) -> None:
        self.hists: dict[tuple[str, str], HdrHistogram] = {}

    def get(self, scenario: str, metric: str) -> HdrHistogram:
        """The histogram for one scenario and metric, created on first use."""
        key = (scenario, metric)
        h = self.hists.get(key)
        if h is None:
            h = self.hists[key] = new_histogram()
        return h

    def add_record(self, r: RequestRecord) -> None:
        """Record a successful request's TTFT, TPOT, ITLs and E2EL."""
        if r.error is not None or not r.chunk_times_us:
            return
        c = r.chunk_times_us
        self.get(r.scenario, "ttft").record_value(max(c[0], LOWEST_US))
        self.get(r.scenario, "e2el").record_value(max(c[-1], LOWEST_US))
        t = tpot_s(r)
        if t is not None:
            self.get(r.scenario, "tpot").record_value(max(round(t * 1e6), LOWEST_US))
        if len(c) > 1:
            itl = self.get(r.scenario, "itl")
            prev = c[0]
            for x in c[1:]:
                itl.record_value(max(x - prev, LOWEST_US))
                prev = x

    def encode(self) -> dict[str, str]:
        """Compressed form for a worker report ("scenario|metric" -> base64 blob)."""
        return {f"{s}|{m}": h.encode().decode("ascii") for (s, m), h in self.hists.items() if h.get_total_count()}

    def merge_encoded(self, blobs: dict[str, Any]) -> None:
        """Add histograms received from a worker."""
        for key, blob in blobs.items():
            scenario, _, metric = key.rpartition("|")
            self.get(scenario, metric).decode_and_add(blob)

    def reset(self) -> None:
        """Forget everything (after a report has been sent)."""
        self.hists.clear()

    def summary_ms(self, percentiles: tuple[float, ...] = (50, 90, 99)) -> dict[str, dict[str, float]]:
        """Per "scenario|metric": count and pN in ms (for live progress and cross-checks)."""
        out: dict[str, dict[str, float]] = {}
        for (s, m), h in sorted(self.hists.items()):
            if h.get_total_count():
                out[f"{s}|{m}"] = percentiles_ms(h, percentiles)
        return out

    def merged(self) -> dict[str, HdrHistogram]:
        """Per metric, every scenario's histogram added together (the "all scenarios" row)."""
        out: dict[str, HdrHistogram] = {}
        for (_, m), h in self.hists.items():
            if h.get_total_count():
                out.setdefault(m, new_histogram()).add(h)
        return out


def percentiles_ms(h: HdrHistogram, percentiles: tuple[float, ...] = (50, 90, 99)) -> dict[str, float]:
    """count and pN of one histogram, in ms. One pass over the buckets (hdrh's get_value_at_percentile and
    get_mean_value walk them in Python once per call: ~0.1-0.2 s each, which stalled the master's loop)."""
    row = {"count": float(h.get_total_count())}
    for p, v in h.get_percentile_to_value_dict(list(percentiles)).items():
        row[f"p{int(p)}"] = v / 1000.0
    return row
