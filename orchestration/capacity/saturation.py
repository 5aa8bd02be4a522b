"""The saturation watch of `--find-max-rate`'s steps: it reads each progress sample of a running step and stops
the step early when the server is over-saturated (completions fall behind arrivals beyond what Little's law
allows) or has already failed the TTFT SLO."""

from __future__ import annotations

import math
from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.measure.metrics import Slo

__all__ = ["SaturationWatch"]

# the in-flight watch: overdue requests allowed = SPREAD x L + K x sqrt(L + WALK x sent) + MARGIN (L = rate x mean
# latency: the latencies' spread and the Poisson in-flight count; sent: near capacity the queue wanders like a
# random walk over the arrivals so far), over WATCH_SAMPLES progress samples in a row, once WATCH_MIN_DONE have
# completed. tests/unit/capacity/test_saturation_watch.py: no stop at 0.5-0.95 x capacity over many Poisson seeds
# for requests of 0.25-5 s; twice the capacity stopped (0.25-1-s requests), 1.2 x over a long enough step.
WATCH_SPREAD, WATCH_K, WATCH_MARGIN = 0.3, 2.0, 3.0
WATCH_SAMPLES, WATCH_MIN_DONE = 2, 5
WATCH_WALK = 0.5
LIVE_SLO_FACTOR, LIVE_SLO_MIN_OK = 3.0, 50


class SaturationWatch:
    """Called with each progress sample of a running step; returns a reason to stop it, or None.

    Over-saturated: completions fall behind arrivals and keep falling behind. By Little's law a server that keeps
    up has answered, by time t, about every request sent before t - W (W: the mean end-to-end latency of the
    requests completed so far), so the requests sent before then and still in flight ("overdue") stay near 0;
    they may exceed it by the spread of the latencies and of the arrivals (SPREAD x L + K x sqrt(L + WALK x sent) +
    MARGIN, L = rate x W, the in-flight count Little's law predicts), not by more. A server behind its arrivals answers the
    requests sent W ago only later and later (its latency grows while W, a mean over the step so far, lags), and
    the overdue count climbs with (rate - capacity) x time. Judged against the step's first seconds instead, a
    step that filled from empty looked over-saturated at any rate (3 -> 11 in flight at 5.6 req/s of ~2-s
    requests, Little's 11)."""

    def __init__(self, slo: Slo, rate: float | None = None) -> None:
        self.slo = slo
        self.rate = rate  # the step's offered rate (None: the arrivals' own so far)
        self.sent: list[tuple[float, float]] = [(0.0, 0.0)]  # (elapsed s, requests sent by then) per sample
        self.over = 0  # consecutive samples over the limit
        self.w_min = 0.0  # the lowest mean latency seen (s)

    def __call__(self, p: dict[str, Any]) -> str | None:
        """A reason to stop now, or None."""
        t = float(p.get("elapsed_s", 0.0))
        inflight = float(p.get("inflight", 0.0))
        done = float(p.get("ok", 0.0)) + float(p.get(K.FAILED, 0.0))
        if t > self.sent[-1][0]:  # the master rewrites progress every 2 s; the watch reads it every 0.5 s
            self.sent.append((t, inflight + done))
            why = self._overdue(p, t, inflight, done)
            if why:
                return why
        lim = self.slo.limits_ms.get("ttft")
        if lim and p.get("ok", 0) >= LIVE_SLO_MIN_OK:
            # the median, not the p99: a start-up burst must not end a step that may still hold
            p50 = max(
                (v for k, v in p.items() if k.endswith("_ttft_p50_ms") and isinstance(v, int | float)),
                default=0.0,
            )
            if p50 > LIVE_SLO_FACTOR * lim:
                return (
                    f"live TTFT p50 {p50:.0f} ms > {LIVE_SLO_FACTOR:g} x the SLO {lim:g} ms: already failed"
                )
        return None

    def _sent_by(self, when: float) -> float:
        """Requests sent by `when` (elapsed s), interpolated between samples."""
        if when <= 0:
            return 0.0
        for (t0, a0), (t1, a1) in zip(self.sent, self.sent[1:], strict=False):
            if when <= t1:
                return a0 + (a1 - a0) * (when - t0) / (t1 - t0)
        return self.sent[-1][1]

    def _overdue(self, p: dict[str, Any], t: float, inflight: float, done: float) -> str | None:
        ok = float(p.get("ok", 0.0))
        total = p.get("e2el_sum_s")
        if ok < WATCH_MIN_DONE or not isinstance(total, int | float) or total <= 0:
            self.over = 0
            return None
        w = float(total) / ok
        rate = self.rate or self.sent[-1][1] / t
        overdue = self._sent_by(t - w) - done
        # the allowance scales with the lowest mean latency seen, not the current one: over-saturated, the mean
        # latency keeps growing, and the allowance with it hid a server answering half its arrivals for 20 s
        self.w_min = min(self.w_min, w) if self.w_min else w
        little = rate * self.w_min
        limit = (
            WATCH_SPREAD * little + WATCH_K * math.sqrt(little + WATCH_WALK * self.sent[-1][1]) + WATCH_MARGIN
        )
        # two samples in a row (2 s apart): one burst of arrivals is not a server falling behind
        self.over = self.over + 1 if overdue > limit else 0
        if self.over < WATCH_SAMPLES:
            return None
        return (
            f"{overdue:.0f} of the {inflight:.0f} requests in flight were sent over {w:.2f} s ago (the mean "
            f"latency so far), more than the {limit:.0f} that Little's law allows at {rate:g} req/s "
            f"x {self.w_min:.2f} s: over-saturated"
        )
