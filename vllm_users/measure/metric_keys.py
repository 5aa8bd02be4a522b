"""Every key of a run's metrics (result.json's top level, each per_scenario entry), declared once: its name,
its unit and the kinds of request it applies to. result_fields writes the metrics under these names; the
summary and the report's diagnosis read them by these names.

Latency figures are a family: `{mean,median,std}_{metric}_ms` and `p{N}_{metric}_ms` (N from
--metric-percentiles), made by `stat_key` and `percentile_key` from the metrics in LATENCIES. A figure that
does not apply to a run's requests (TTFT of embeddings, output tokens of rerank) is absent or None, never 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from vllm_users.measure.kinds import REQUEST_KINDS, RequestKind

ALL: frozenset[RequestKind] = frozenset(REQUEST_KINDS)
GENERATIVE: frozenset[RequestKind] = frozenset(("streamed", "not_streamed"))
STREAMED: frozenset[RequestKind] = frozenset(("streamed",))
UNSTREAMED: frozenset[RequestKind] = frozenset(("not_streamed", "pooling"))
POOLING: frozenset[RequestKind] = frozenset(("pooling",))


@dataclass(frozen=True)
class Key:
    """One declared metric key: its result.json name, unit ("-": a block of its own) and the requests it applies to."""

    name: str
    unit: str
    applies_to: frozenset[RequestKind] = ALL


DECLARED: dict[str, Key] = {}  # name -> Key, in the order compute_metrics writes them


def _key(name: str, unit: str, applies_to: frozenset[RequestKind] = ALL) -> str:
    DECLARED[name] = Key(name, unit, applies_to)
    return name


# vLLM bench serve's fields, in its order
DURATION = _key("duration", "s")
COMPLETED = _key("completed", "requests")
FAILED = _key("failed", "requests")
TOTAL_INPUT_TOKENS = _key("total_input_tokens", "tokens")
TOTAL_OUTPUT_TOKENS = _key("total_output_tokens", "tokens", GENERATIVE)
REQUEST_THROUGHPUT = _key("request_throughput", "req/s")
REQUEST_GOODPUT = _key("request_goodput", "req/s")  # None without --goodput
OUTPUT_THROUGHPUT = _key("output_throughput", "tok/s", GENERATIVE)
TOTAL_TOKEN_THROUGHPUT = _key("total_token_throughput", "tok/s")
MAX_OUTPUT_TOKENS_PER_S = _key("max_output_tokens_per_s", "tok/s", GENERATIVE)
MAX_CONCURRENT_REQUESTS = _key("max_concurrent_requests", "requests")
# ours: pooling throughput is input tokens/s
INPUT_THROUGHPUT = _key("input_throughput", "tok/s", POOLING)
# reasoning models (absent for a run without reasoning)
REASONING_REQUESTS = _key("reasoning_requests", "requests", GENERATIVE)
REASONING_TOKENS_ESTIMATED_REQUESTS = _key("reasoning_tokens_estimated_requests", "requests", GENERATIVE)
TOTAL_REASONING_TOKENS = _key("total_reasoning_tokens", "tokens", GENERATIVE)
TOTAL_ANSWER_TOKENS = _key("total_answer_tokens", "tokens", GENERATIVE)
# images (absent for a run that sent none)
IMAGE_REQUESTS = _key("image_requests", "requests", GENERATIVE)
TOTAL_IMAGES = _key("total_images", "images", GENERATIVE)
MEAN_IMAGES_PER_REQUEST = _key("mean_images_per_request", "images", GENERATIVE)
MEAN_IMAGE_TOKENS_PER_REQUEST = _key("mean_image_tokens_per_request", "tokens", GENERATIVE)
IMAGE_TOKENS_ESTIMATED_REQUESTS = _key("image_tokens_estimated_requests", "requests", GENERATIVE)
# --goodput: the SLO, good requests and the fraction of each metric met
GOODPUT = _key("goodput", "-")
# run health and what the requests were
ERRORS_BY_KIND = _key("errors_by_kind", "requests")
HTTP_ERRORS_BY_STATUS = _key("http_errors_by_status", "requests")
CHUNK_TOKEN_RATIO = _key("chunk_token_ratio", "chunks/token", GENERATIVE)
TOKENS_ESTIMATED_REQUESTS = _key("tokens_estimated_requests", "requests")
MISSING_DONE_REQUESTS = _key("missing_done_requests", "requests", STREAMED)
COMPRESSED_STREAMS = _key("compressed_streams", "requests")
# counts that cannot both be true, settled and flagged (absent when no request had them)
USAGE_BELOW_CHUNKS = _key("usage_below_chunks", "-", STREAMED)
DELIVERED_AT_ONCE = _key("delivered_at_once", "-", STREAMED)
ERROR_MESSAGES = _key("error_messages", "-")
NOT_STREAMED_REQUESTS = _key("not_streamed_requests", "requests", UNSTREAMED)
POOLING_REQUESTS = _key("pooling_requests", "requests", POOLING)
PREFIX_CACHE_HIT_RATE = _key("prefix_cache_hit_rate", "fraction")
CACHED_TOKENS_REPORTED = _key("cached_tokens_reported", "bool")
VALIDITY_RATE = _key("validity_rate", "fraction", GENERATIVE)
INPUT_LEN_REQUESTED_MEAN = _key("input_len_requested_mean", "tokens")
INPUT_LEN_ACTUAL_MEAN = _key("input_len_actual_mean", "tokens")
ARRIVALS = _key("arrivals", "-")
WINDOWS = _key("windows", "-")  # --warmup/--cooldown
INTERRUPTED = _key("interrupted", "requests")


Stat = Literal["mean", "median", "std"]
LATENCY_STATS: tuple[Stat, ...] = get_args(Stat)


@dataclass(frozen=True)
class Latency:
    """A latency metric (ms): the family of keys `{stat}_{name}_ms`, `p{N}_{name}_ms` in a result.

    `follows`: a reasoning metric's percentiles are written when this metric's are (--percentile-metrics)."""

    name: str
    applies_to: frozenset[RequestKind]
    follows: str | None = None

    def key(self, stat: Stat) -> str:
        """The key of one statistic of this metric: "mean_ttft_ms"."""
        return stat_key(stat, self.name)


TTFT = Latency("ttft", STREAMED)
TPOT = Latency("tpot", STREAMED)
ITL = Latency("itl", STREAMED)
E2EL = Latency("e2el", ALL)
LATENCIES = (TTFT, TPOT, ITL, E2EL)  # vLLM bench serve's metrics (--percentile-metrics names)
TTFA = Latency("ttfa", STREAMED, "ttft")  # reasoning models: time to the first answer chunk
REASONING_TPOT = Latency("reasoning_tpot", STREAMED, "tpot")
ANSWER_TPOT = Latency("answer_tpot", STREAMED, "tpot")
REASONING_LATENCIES = (TTFA, REASONING_TPOT, ANSWER_TPOT)
_BY_NAME = {m.name: m for m in (*LATENCIES, *REASONING_LATENCIES)}


def percentile_name(p: float) -> str:
    """The key of percentile `p` in the statistics, as vLLM bench serve writes it: "p99", "p99.9"."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{float(p)}"


def stat_key(stat: str, metric: str) -> str:
    """`{stat}_{metric}_ms`: "mean_ttft_ms", "p99_itl_ms" (stat: mean, median, std or a percentile name)."""
    return f"{stat}_{metric}_ms"


def percentile_key(p: float, metric: str) -> str:
    """The key of percentile `p` of `metric`: "p99_ttft_ms", "p99.9_e2el_ms"."""
    return stat_key(percentile_name(p), metric)


def _is_percentile(stat: str) -> bool:
    return stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit()


def percentile_keys(res: Iterable[str], metric: str) -> list[tuple[str, str]]:
    """(key, "99.9") of the `p{N}_{metric}_ms` keys in `res`, in its order (the run's --metric-percentiles)."""
    tail = f"_{metric}_ms"
    # the middle must be a number: p99_tpot_ms is TPOT's, p99_answer_tpot_ms is not
    return [(k, k[1 : -len(tail)]) for k in res if k.endswith(tail) and _is_percentile(k[: -len(tail)])]


def declared(name: str) -> Key | None:
    """The declaration of a metric key (a latency key: its metric's unit ms and requests); None when undeclared."""
    if name in DECLARED:
        return DECLARED[name]
    stat, _, rest = name.partition("_")
    if rest.endswith("_ms") and (stat in LATENCY_STATS or _is_percentile(stat)):
        m = _BY_NAME.get(rest[:-3])
        if m is not None:
            return Key(name, "ms", m.applies_to)
    return None
