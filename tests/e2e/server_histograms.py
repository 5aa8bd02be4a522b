"""vLLM's own histograms over one run: scrape /metrics in full before and after, take the difference.

    before = scrape_full(url); ...load...; figures = delta(before, scrape_full(url))
    figures["request_time_per_output_token_seconds"]["mean"]   # the server's mean TPOT over that run

    with Scraper(url) as s: ...load...      # a snapshot every 2 s, for a window known only afterwards
    t_a, first, t_b, last = s.inside(lo, hi); figures = delta(first, last)

ttft_bracket() is the TTFT check against a peer client, grounded in the server's own TTFT (see its docstring).
Used by tests/e2e/test_agreement_vllm_bench.py (each tool's run beside the server's view of it),
tests/e2e/test_agreement_paired.py (both tools at once) and benchmarks/agreement_gap.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.e2e.vllm_env import metric_samples

Snapshot = dict[tuple[str, str], float]

HISTOGRAMS = (
    "time_to_first_token_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "inter_token_latency_seconds",
    "request_time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_inference_time_seconds",
    "iteration_tokens_total",
    "request_prompt_tokens",
)
COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_hits_total",
    "process_cpu_seconds_total",
)


def scrape_full(url: str) -> Snapshot:
    """Every sample of /metrics, histogram buckets included: (name, le or '') -> value summed over labels."""
    out: dict[tuple[str, str], float] = {}
    for name, labels, value in metric_samples(url):
        key = (name, labels.get("le", ""))
        out[key] = out.get(key, 0.0) + value
    return out


def quantile_bucket(buckets: list[tuple[float, float]], count: float, q: float) -> tuple[float, float]:
    """The bucket (lower edge, upper edge) that holds rank q*count: all a histogram can say of a quantile."""
    lo = 0.0
    for le, cum in buckets:
        if cum >= q * count:
            return lo, le
        lo = le
    return lo, float("inf")


def _quantile(buckets: list[tuple[float, float]], count: float, q: float) -> float:
    """Prometheus histogram_quantile: linear inside the bucket that holds rank q*count."""
    rank, lo, prev = q * count, 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * ((rank - prev) / (cum - prev) if cum > prev else 0.0)
        lo, prev = le, cum
    return lo


def delta(before: dict, after: dict) -> dict[str, Any]:
    """Per histogram: count, mean, p50, p90 (interpolated) and p50_bucket (the bucket holding the median) of the
    samples added between the two scrapes; counters' deltas."""
    out: dict[str, Any] = {}
    for h in HISTOGRAMS:
        name = "vllm:" + h
        cnt = after.get((name + "_count", ""), 0) - before.get((name + "_count", ""), 0)
        tot = after.get((name + "_sum", ""), 0) - before.get((name + "_sum", ""), 0)
        les = sorted({le for (n, le) in after if n == name + "_bucket"}, key=float)
        buckets = [
            (float(le), after[(name + "_bucket", le)] - before.get((name + "_bucket", le), 0)) for le in les
        ]
        if cnt:
            out[h] = {
                "count": cnt,
                "mean": tot / cnt,
                "p50": _quantile(buckets, cnt, 0.5),
                "p90": _quantile(buckets, cnt, 0.9),
                "p50_bucket": quantile_bucket(buckets, cnt, 0.5),
            }
    for c in COUNTERS:
        out[c] = after.get((c, ""), 0) - before.get((c, ""), 0)
    return out


class Scraper:
    """Scrapes /metrics in full every `every` s on a thread, so that the histograms can be cut to a window
    known only after the load (the overlap of two clients' runs). Each snapshot is (t0, t1, samples): epoch
    seconds before and after its GET; the server rendered it somewhere between the two."""

    def __init__(self, url: str, every: float = 2.0) -> None:
        self.url, self.every = url, every
        self.snapshots: list[tuple[float, float, Snapshot]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)

    def _loop(self) -> None:
        while True:
            t0 = time.time()
            try:
                snap = scrape_full(self.url)
            except OSError:  # a slow answer on a busy box: the next snapshot serves as well
                snap = None
            if snap is not None:
                self.snapshots.append((t0, time.time(), snap))
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def inside(self, lo: float, hi: float) -> tuple[float, Snapshot, float, Snapshot]:
        """(t_a, first, t_b, last): the first snapshot taken wholly after lo, the last wholly before hi, and
        the middles of their GETs (when the server rendered them, to within half a GET)."""
        after = [s for s in self.snapshots if s[0] >= lo]
        before = [s for s in self.snapshots if s[1] <= hi]
        assert after and before and after[0][1] < before[-1][0], (
            f"no two /metrics snapshots inside [{lo:.1f}, {hi:.1f}] ({len(self.snapshots)} taken)"
        )
        a, b = after[0], before[-1]
        return (a[0] + a[1]) / 2, a[2], (b[0] + b[1]) / 2, b[2]


def ttft_margins(ours: float, server_ours: float, peer: float, server_peer: float) -> tuple[float, float]:
    """(under, excess) of ttft_bracket: how far ours reads under the server's own (ms; > 0 is impossible for a
    correct client), and our overhead above the server's beyond the peer's, as a fraction of the peer's TTFT."""
    return server_ours - ours, ((ours - server_ours) - (peer - server_peer)) / peer


def ttft_bracket(
    ours: float, server_ours: float, peer: float, server_peer: float, *, tol: float, slack: float
) -> list[str]:
    """Why our TTFT is not bracketed by the server's and the peer's (empty: it is). One figure each (ms, a mean
    or a median): ours, the server's for the requests ours sent, the peer's, the server's for the peer's.

    A client's TTFT is the server's (vLLM stamps arrival as it starts rendering the prompt, and its first
    token as the engine's output reaches the front end) plus the client's own path on both sides: its send
    (timestamp to first byte), HTTP parsing, and the chunk's way back. So the truth is bounded below by the
    server's figure, which no correct client can read under, and the error of a client is its overhead above
    it. A two-sided bound around the peer (|ours/peer - 1| <= tol) fails a client that is *more* accurate than
    the peer: `vllm bench serve` stamps a request's start, then takes ~ms until its first byte, and on a busy
    box we read 11 % under it. So:
      ours >= server_ours - slack        (slack: requests at a window's edges, a population the server's
                                          figure shares with the peer's; for a median, pass the lower
                                          edge of the server's median bucket, its only sure bound)
      ours - server_ours <= (peer - server_peer) + tol * peer
                                         (our overhead at most the peer's, plus the agreement tolerance)
    It still fails when we read TTFT too early (under the server's own) or too late (tol past the peer)."""
    out = []
    under, excess = ttft_margins(ours, server_ours, peer, server_peer)
    if under > slack:
        out.append(
            f"ours {ours:.2f} ms is under the server's own {server_ours:.2f} ms - {slack:.2f} ms slack: a "
            f"client cannot see its first token before the server produced it"
        )
    over_ours, over_peer = ours - server_ours, peer - server_peer
    if excess > tol:
        out.append(
            f"ours {ours:.2f} ms is {over_ours:+.2f} ms over the server's, the peer's {peer:.2f} ms "
            f"{over_peer:+.2f} ms: more than the peer's overhead + {tol:.0%} of its TTFT"
        )
    return out
