"""Server-side statistics, exposed in Prometheus text format with vLLM's metric names.

Counters and histograms are plain Python numbers updated on the hot path (a bisect and two adds per
observation, ~0.3 µs, where prometheus_client's Histogram.observe costs ~2 µs); a custom collector
turns them into metric families only when /metrics is scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

# vLLM's bucket boundaries (seconds)
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
# fine buckets for our own lateness histogram: 50 µs .. 1 s
LATENESS_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)


class FastHistogram:
    """Cumulative-on-read histogram: observe() is a bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum", "count", "max")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.max = 0.0

    def observe(self, value: float) -> None:
        """Record one value."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1
        if value > self.max:
            self.max = value

    def observe_many(self, value: float, n: int) -> None:
        """Record the same value n times (a batch of equal gaps)."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n
        if value > self.max:
            self.max = value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative (le, count) pairs, +Inf last."""
        out = []
        acc = 0
        for b, c in zip(self.bounds, self.counts, strict=False):
            acc += c
            out.append((repr(float(b)), float(acc)))
        out.append(("+Inf", float(acc + self.counts[-1])))
        return out

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding quantile q (an over-estimate, never an under-estimate)."""
        if self.count == 0:
            return 0.0
        rank = q * self.count
        acc = 0
        for b, c in zip(self.bounds, self.counts, strict=False):
            acc += c
            if acc >= rank:
                return min(b, self.max)
        return self.max


class SimStats:
    """Every number the simulator reports; the engine and server mutate the fields directly."""

    def __init__(self, model: str, num_experts: int = 0, spec_tokens: int = 0) -> None:
        self.model = model
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.success: dict[str, int] = defaultdict(int)
        self.ttft = FastHistogram(TTFT_BUCKETS)
        self.itl = FastHistogram(ITL_BUCKETS)
        self.e2e = FastHistogram(E2E_BUCKETS)
        self.queue = FastHistogram(TTFT_BUCKETS)
        self.lateness = FastHistogram(LATENESS_BUCKETS)
        self.served = 0
        self.generate_requests = 0  # POSTs to /v1/(chat/)completions received, whatever their fate
        self.by_status: dict[int, int] = defaultdict(int)
        self.faults: dict[str, int] = defaultdict(int)
        self.expert_tokens = [0] * num_experts
        # speculative decoding (vLLM's spec_decode counters): absent from /metrics when it is off
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted = 0
        self.spec_accepted_per_pos = [0] * spec_tokens

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready summary for GET /sim/stats."""
        return {
            "served": self.served,
            "generate_requests": self.generate_requests,
            "by_status": {str(k): v for k, v in sorted(self.by_status.items())},
            "faults_injected": dict(self.faults),
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "running": self.running,
            "waiting": self.waiting,
            "kv_cache_usage_perc": self.kv_usage,
            "prefix_cache_queries": self.prefix_queries,
            "prefix_cache_hits": self.prefix_hits,
            "preemptions": self.preemptions,
            "finished": dict(self.success),
            "lateness_s": {
                "count": self.lateness.count,
                "max": self.lateness.max,
                "mean": self.lateness.sum / self.lateness.count if self.lateness.count else 0.0,
                "p50": self.lateness.quantile(0.5),
                "p99": self.lateness.quantile(0.99),
            },
            "expert_tokens": list(self.expert_tokens),
            **(
                {
                    "spec_decode": {
                        "num_drafts": self.spec_drafts,
                        "num_draft_tokens": self.spec_draft_tokens,
                        "num_accepted_tokens": self.spec_accepted,
                        "num_accepted_tokens_per_pos": list(self.spec_accepted_per_pos),
                    }
                }
                if self.spec_accepted_per_pos
                else {}
            ),
        }


class _Collector:
    """prometheus_client collector reading a SimStats at scrape time."""

    def __init__(self, stats: SimStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        """Yield vLLM's metric families (and ours, prefixed ``sim:``)."""
        s = self.stats
        # vLLM 0.32 labels every metric with the engine index and the served model name
        lbl = ["engine", "model_name"]
        val = ["0", s.model]

        def gauge(name: str, doc: str, v: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=lbl)
            g.add_metric(val, v)
            return g

        def counter(name: str, doc: str, v: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=lbl)
            c.add_metric(val, v)
            return c

        def hist(name: str, doc: str, h: FastHistogram) -> HistogramMetricFamily:
            f = HistogramMetricFamily(name, doc, labels=lbl)
            f.add_metric(val, h.buckets(), h.sum)
            return f

        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", s.running)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage)
        yield counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_queries,
        )
        yield counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", s.prefix_hits
        )
        yield counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", s.preemptions
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens)
        # vLLM's meaning: a request the engine finished, by finish reason (an in-stream error under "error"); not
        # one refused before the engine (400, an injected 500/429) nor one the client abandoned (stream.py counts)
        succ = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["engine", "finished_reason", "model_name"],
        )
        for reason in ("stop", "length", "abort", "error", "repetition"):
            n = s.success.get(reason, 0) + (s.success.get("tool_calls", 0) if reason == "stop" else 0)
            succ.add_metric(["0", reason, s.model], n)
        yield succ
        yield hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft)
        yield hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", s.itl)
        yield hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", s.e2e)
        yield hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            s.queue,
        )
        if s.spec_accepted_per_pos:  # vLLM v1's names (its exposition adds _total to each counter)
            yield counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", s.spec_drafts)
            yield counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", s.spec_draft_tokens)
            yield counter(
                "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", s.spec_accepted
            )
            pos = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=["engine", "model_name", "position"],
            )
            for i, n in enumerate(s.spec_accepted_per_pos):
                pos.add_metric(["0", s.model, str(i)], n)
            yield pos
        lbl, val = ["model_name"], [s.model]  # our own metrics: no engine label
        yield hist(
            "sim:emit_lateness_seconds",
            "Simulator: actual minus scheduled emit time of SSE writes.",
            s.lateness,
        )
        yield counter("sim:requests_served", "Simulator: HTTP responses completed.", s.served)
        faults = CounterMetricFamily(
            "sim:faults_injected", "Simulator: faults injected, by kind.", labels=["model_name", "kind"]
        )
        for kind, n in sorted(s.faults.items()):
            faults.add_metric([s.model, kind], n)
        yield faults
        if s.expert_tokens:
            moe = CounterMetricFamily(
                "vllm:moe_expert_tokens",
                "Simulator extension: tokens routed to each MoE expert.",
                labels=["engine", "expert", "model_name"],
            )
            for i, n in enumerate(s.expert_tokens):
                moe.add_metric(["0", str(i), s.model], n)
            yield moe


def make_registry(stats: SimStats) -> CollectorRegistry:
    """A private registry holding only the simulator's collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(stats))  # type: ignore[arg-type, unused-ignore]
    return reg


def render(registry: CollectorRegistry) -> bytes:
    """Prometheus text exposition of the registry."""
    return generate_latest(registry)
