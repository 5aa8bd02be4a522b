"""Exact latency distributions: one HdrHistogram (µs, 3 significant digits) per scenario x metric.

Workers encode them into their reports; the master decodes and adds them, which is lossless.
A record's values are recorded lazily and in bulk (`record_many`, numpy): hdrh's `record_value` costs ~1.5 µs
in Python per value, and a 64-token request has 66 of them (py-spy: 12 % of a worker at 256 streams).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from vllm_users.measure.metrics import tpot_s
from vllm_users.measure.record import RequestRecord

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
HIST_METRICS = ("ttft", "tpot", "itl", "e2el")


def _no_pause() -> None:
    pass


def new_histogram() -> HdrHistogram:
    """An empty histogram with the project's range and precision."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_many(h: HdrHistogram, values: np.ndarray) -> None:
    """`h.record_value(v)` for every v (clamped to LOWEST_US), in one numpy pass; values past the
    histogram's range are skipped, as record_value skips them."""
    v = np.maximum(np.asarray(values, dtype=np.int64), LOWEST_US)
    if not v.size:
        return
    # hdrh's _counts_index_for, vectorised: bit_length(v | sub_bucket_mask) is frexp's exponent (exact < 2**53)
    pow2ceiling = np.frexp((v | h.sub_bucket_mask).astype(np.float64))[1].astype(np.int64)
    bucket = pow2ceiling - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub = v >> (bucket + h.unit_magnitude)
    idx = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + sub - h.sub_bucket_half_count
    ok = (idx >= 0) & (idx < h.counts_len)
    if not ok.all():
        idx, v = idx[ok], v[ok]
        if not v.size:
            return
    counts = np.frombuffer(h.counts, dtype=np.int64, count=h.counts_len)
    counts += np.bincount(idx, minlength=h.counts_len)
    h.total_count += int(v.size)
    h.min_value = min(h.min_value, int(v.min()))
    h.max_value = max(h.max_value, int(v.max()))


class HistogramSet:
    """Histograms keyed by (scenario, metric), or (class, metric) for a per-class set; successes only."""

    def __init__(self) -> None:
        self._hists: dict[tuple[str, str], HdrHistogram] = {}
        # per scenario: chunk-time lists and TPOT values (µs) not yet in the histograms
        self._chunks: dict[str, list[list[int]]] = {}
        self._tpots: dict[str, list[int]] = {}
        self._single: dict[
            tuple[str, str], list[int]
        ] = {}  # one value per record: TTFA, E2EL, TTFT without ITL

    @property
    def hists(self) -> dict[tuple[str, str], HdrHistogram]:
        """Every histogram, with everything added so far."""
        self._flush()
        return self._hists

    def get(self, scenario: str, metric: str) -> HdrHistogram:
        """The histogram for one scenario and metric (everything added so far), created on first use."""
        self._flush()
        return self._get(scenario, metric)

    def _get(self, scenario: str, metric: str) -> HdrHistogram:
        key = (scenario, metric)
        h = self._hists.get(key)
        if h is None:
            h = self._hists[key] = new_histogram()
        return h

    def add_record(self, r: RequestRecord, key: str | None = None, itl: bool = True) -> None:
        """Record a successful request's TTFT, TPOT, ITLs and E2EL (kept as they are until read), under its
        scenario or `key` (a set keyed by traffic class, endpoint or replica: the live rows); `itl=False`: no
        ITLs (the live rows show none, and a record's gaps cost most: ~63 values against 3)."""
        if r.error is not None or not r.chunk_times_us:
            return
        k = r.scenario if key is None else key
        if r.not_streamed:  # its one "chunk" is the end: an E2EL, no TTFT/ITL/TPOT
            self._single.setdefault((k, "e2el"), []).append(r.chunk_times_us[-1])
            return
        if r.answer_us is not None:  # a reasoning model's time to first answer token
            self._single.setdefault((k, "ttfa"), []).append(r.answer_us)
        if itl:
            self._chunks.setdefault(k, []).append(r.chunk_times_us)
        else:
            self._single.setdefault((k, "ttft"), []).append(r.chunk_times_us[0])
            self._single.setdefault((k, "e2el"), []).append(r.chunk_times_us[-1])
        t = tpot_s(r)
        if t is not None:
            self._tpots.setdefault(k, []).append(round(t * 1e6))

    def _flush(self, pause: Callable[[], None] = _no_pause) -> None:
        """Move the pending values into the histograms (one numpy pass per scenario and metric); `pause`
        between scenarios (a worker's report loop yields there)."""
        for scenario, lists in self._chunks.items():
            pause()
            lens = np.fromiter((len(c) for c in lists), dtype=np.int64, count=len(lists))
            flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lens.sum()))
            ends = np.cumsum(lens)
            record_many(self._get(scenario, "ttft"), flat[ends - lens])
            record_many(self._get(scenario, "e2el"), flat[ends - 1])
            if flat.size > len(lists):
                gaps = np.diff(flat)
                inside = np.ones(gaps.size, dtype=bool)
                inside[ends[:-1] - 1] = False  # the step from one record's last chunk to the next's first
                record_many(self._get(scenario, "itl"), gaps[inside])
        for scenario, tpots in self._tpots.items():
            record_many(self._get(scenario, "tpot"), np.array(tpots, dtype=np.int64))
        for (scenario, metric), values in self._single.items():
            record_many(self._get(scenario, metric), np.array(values, dtype=np.int64))
        self._chunks.clear()
        self._tpots.clear()
        self._single.clear()

    def encode(self, pause: Callable[[], None] = _no_pause) -> dict[str, str]:
        """Compressed form for a worker report ("scenario|metric" -> base64 blob); `pause` runs between the
        steps (flushing a scenario, encoding its histograms: each well under a millisecond)."""
        self._flush(pause)
        pause()
        return {
            f"{s}|{m}": h.encode().decode("ascii") for (s, m), h in self._hists.items() if h.get_total_count()
        }

    def merge_encoded(self, blobs: dict[str, Any]) -> None:
        """Add histograms received from a worker."""
        for key, blob in blobs.items():
            scenario, _, metric = key.rpartition("|")
            self._get(scenario, metric).decode_and_add(blob)

    def reset(self) -> None:
        """Forget everything (after a report has been sent)."""
        self._hists.clear()
        self._chunks.clear()
        self._tpots.clear()
        self._single.clear()

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
