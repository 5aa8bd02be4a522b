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


Better = Literal["higher", "lower"]


@dataclass(frozen=True)
class Key:
    """One declared metric key, with everything a renderer needs.

    name: its result.json name; unit ("-": a block of its own); applies_to: the requests it applies to;
    label: its row in the report's tables (HTML, Markdown, PDF, comparisons; None: no row); fmt: the format of its
    value; better: the direction that is better (None: neutral, such as counts that follow the run's length);
    row: its place in the report's metric table (None: not there; the latency rows sit at LATENCY_ROW);
    compared: a row of the comparison of runs; console: its label in the end-of-run summary (vLLM bench serve's
    wording where it has one); listed: the summary prints it among the throughputs by this declaration alone."""

    name: str
    unit: str
    applies_to: frozenset[RequestKind] = ALL
    label: str | None = None
    fmt: str = ""
    better: Better | None = None
    row: int | None = None
    compared: bool = False
    console: str | None = None
    listed: bool = False


DECLARED: dict[str, Key] = {}  # name -> Key, in the order compute_metrics writes them
LATENCY_ROW = 50  # the latency metrics' rows sit between the report table's head (< 50) and its tail (> 50)


def _key(
    name: str,
    unit: str,
    applies_to: frozenset[RequestKind] = ALL,
    label: str | None = None,
    fmt: str = "",
    *,
    better: Better | None = None,
    row: int | None = None,
    compared: bool = False,
    console: str | None = None,
    listed: bool = False,
) -> str:
    DECLARED[name] = Key(name, unit, applies_to, label, fmt, better, row, compared, console, listed)
    return name


# vLLM bench serve's fields, in its order
DURATION = _key(
    "duration", "s", ALL, "Duration (s)", ".2f", row=3, compared=True, console="Benchmark duration (s)"
)
COMPLETED = _key(
    "completed",
    "requests",
    ALL,
    "Successful requests",
    "d",
    row=1,
    compared=True,
    console="Successful requests",
)
FAILED = _key(
    "failed", "requests", ALL, "Failed requests", "d", row=2, compared=True, console="Failed requests"
)
TOTAL_INPUT_TOKENS = _key("total_input_tokens", "tokens", console="Total input tokens")
TOTAL_OUTPUT_TOKENS = _key("total_output_tokens", "tokens", GENERATIVE, console="Total generated tokens")
REQUEST_THROUGHPUT = _key(
    "request_throughput",
    "req/s",
    ALL,
    "Request throughput (req/s)",
    ".2f",
    better="higher",
    row=4,
    compared=True,
    console="Request throughput (req/s)",
)
# None without --goodput
REQUEST_GOODPUT = _key(
    "request_goodput",
    "req/s",
    ALL,
    "Request goodput (req/s)",
    ".2f",
    better="higher",
    row=5,
    compared=True,
    console="Request goodput (req/s)",
)
OUTPUT_THROUGHPUT = _key(
    "output_throughput",
    "tok/s",
    GENERATIVE,
    "Output token throughput (tok/s)",
    ".2f",
    better="higher",
    row=6,
    compared=True,
    console="Output token throughput (tok/s)",
)
TOTAL_TOKEN_THROUGHPUT = _key(
    "total_token_throughput",
    "tok/s",
    ALL,
    "Total token throughput (tok/s)",
    ".2f",
    better="higher",
    row=7,
    compared=True,
    console="Total token throughput (tok/s)",
)
MAX_OUTPUT_TOKENS_PER_S = _key(
    "max_output_tokens_per_s",
    "tok/s",
    GENERATIVE,
    "Peak output tokens/s",
    ".2f",
    better="higher",
    row=9,
    compared=True,
    console="Peak output token throughput (tok/s)",
)
MAX_CONCURRENT_REQUESTS = _key(
    "max_concurrent_requests",
    "requests",
    ALL,
    "Peak concurrent requests",
    "d",
    row=10,
    compared=True,
    console="Peak concurrent requests",
)
# ours: pooling throughput is input tokens/s (pooling runs only: they have no output tokens)
INPUT_THROUGHPUT = _key(
    "input_throughput",
    "tok/s",
    POOLING,
    "Input token throughput (tok/s)",
    ".2f",
    better="higher",
    row=8,
    console="Input token throughput (tok/s)",
)
# a user's stream speed: the mean over the streamed successes of each one's output tokens/s after its first
# token (1000 / its TPOT in ms); absent where no streamed success has a TPOT
OUTPUT_THROUGHPUT_PER_USER = _key(
    "output_throughput_per_user",
    "tok/s",
    STREAMED,
    "Output tokens/s per user (mean)",
    ".2f",
    better="higher",
    row=11,
    compared=True,
    console="Output tokens/s per user (mean)",
    listed=True,
)
# reasoning models (absent for a run without reasoning)
REASONING_REQUESTS = _key("reasoning_requests", "requests", GENERATIVE)
REASONING_TOKENS_ESTIMATED_REQUESTS = _key("reasoning_tokens_estimated_requests", "requests", GENERATIVE)
TOTAL_REASONING_TOKENS = _key(
    "total_reasoning_tokens",
    "tokens",
    GENERATIVE,
    "Reasoning tokens",
    "d",
    row=54,
    console="Reasoning tokens",
)
TOTAL_ANSWER_TOKENS = _key(
    "total_answer_tokens", "tokens", GENERATIVE, "Answer tokens", "d", row=55, console="Answer tokens"
)
# images (absent for a run that sent none, never 0)
IMAGE_REQUESTS = _key("image_requests", "requests", GENERATIVE)
TOTAL_IMAGES = _key("total_images", "images", GENERATIVE, "Images sent", "d", row=58)
MEAN_IMAGES_PER_REQUEST = _key(
    "mean_images_per_request",
    "images",
    GENERATIVE,
    "Images per request",
    ".2f",
    row=59,
    console="Images per request",
)
MEAN_IMAGE_TOKENS_PER_REQUEST = _key(
    "mean_image_tokens_per_request",
    "tokens",
    GENERATIVE,
    "Image tokens per request (estimated)",
    ".1f",
    row=60,
    console="Image tokens per request (est.)",
)
IMAGE_TOKENS_ESTIMATED_REQUESTS = _key("image_tokens_estimated_requests", "requests", GENERATIVE)
# --goodput: the SLO, good requests and the fraction of each metric met
GOODPUT = _key("goodput", "-", better="higher")
# run health and what the requests were
ERRORS_BY_KIND = _key("errors_by_kind", "requests", console="Failures by kind")
HTTP_ERRORS_BY_STATUS = _key("http_errors_by_status", "requests")
CHUNK_TOKEN_RATIO = _key(
    "chunk_token_ratio",
    "chunks/token",
    GENERATIVE,
    "Chunks per output token",
    ".3f",
    row=53,
    compared=True,
    console="Chunks per output token",
)
TOKENS_ESTIMATED_REQUESTS = _key("tokens_estimated_requests", "requests")
MISSING_DONE_REQUESTS = _key(
    "missing_done_requests", "requests", STREAMED, console="Streams without [DONE] (complete)"
)
COMPRESSED_STREAMS = _key("compressed_streams", "requests", console="Compressed by the server (decoded)")
# counts that cannot both be true, settled and flagged (absent when no request had them)
USAGE_BELOW_CHUNKS = _key("usage_below_chunks", "-", STREAMED)
DELIVERED_AT_ONCE = _key("delivered_at_once", "-", STREAMED)
ERROR_MESSAGES = _key("error_messages", "-")
SERVER_UNREACHABLE = _key("server_unreachable", "-", console="Server unreachable")
NOT_STREAMED_REQUESTS = _key(
    "not_streamed_requests", "requests", UNSTREAMED, "Requests not streamed (no TTFT/ITL)", "d", row=56
)
POOLING_REQUESTS = _key(
    "pooling_requests", "requests", POOLING, "Pooling requests (embeddings/rerank/score)", "d", row=57
)
PREFIX_CACHE_HIT_RATE = _key(
    "prefix_cache_hit_rate",
    "fraction",
    ALL,
    "Prefix cache hit rate (usage)",
    ".1%",
    better="higher",
    row=51,
    compared=True,
    console="Prefix cache hit rate (usage)",
)
CACHED_TOKENS_REPORTED = _key("cached_tokens_reported", "bool")
VALIDITY_RATE = _key(
    "validity_rate",
    "fraction",
    GENERATIVE,
    "Valid outputs (json/tools)",
    ".1%",
    better="higher",
    row=52,
    compared=True,
    console="Valid outputs (json/tools)",
)
INPUT_LEN_REQUESTED_MEAN = _key("input_len_requested_mean", "tokens")
INPUT_LEN_ACTUAL_MEAN = _key("input_len_actual_mean", "tokens")
ARRIVALS = _key("arrivals", "-")
WINDOWS = _key("windows", "-")  # --warmup/--cooldown
DELIVERY = _key("delivery", "-")  # the offered and achieved rate over the interior (measure.delivered)
INTERRUPTED = _key("interrupted", "requests", console="Interrupted requests")
# the GPU's figures over the measured window: result.json's `energy` block (vllm_users.measure.energy), not
# compute_metrics', from --gpu-metrics' samples
ENERGY_J = _key("energy_j", "J", ALL, "GPU energy (J)", ".1f")
MEAN_POWER_W = _key("mean_power_w", "W", ALL, "Mean GPU power (W)", ".1f")
PEAK_POWER_W = _key("peak_power_w", "W", ALL, "Peak GPU power (W)", ".1f")
ENERGY_PER_OUTPUT_TOKEN_J = _key(
    "energy_per_output_token_j",
    "J/token",
    GENERATIVE,
    "GPU energy per output token (J)",
    ".4g",
    better="lower",
)
ENERGY_PER_REQUEST_J = _key(
    "energy_per_request_j", "J/request", ALL, "GPU energy per request (J)", ".4g", better="lower"
)
OUTPUT_TOKENS_PER_J = _key(
    "output_tokens_per_j", "tokens/J", GENERATIVE, "Output tokens per joule", ".4g", better="higher"
)
GPU_UTIL_MEAN = _key("gpu_util_mean_pct", "%", ALL, "Mean GPU utilisation (%)", ".1f")
ENERGY_KWH = _key("energy_kwh", "kWh")
ENERGY_COST_USD = _key("energy_cost_usd", "USD")
ENERGY_USD_PER_MILLION_OUTPUT_TOKENS = _key("energy_usd_per_million_output_tokens", "USD", GENERATIVE)
ENERGY_FIGURES = (
    ENERGY_J,
    MEAN_POWER_W,
    PEAK_POWER_W,
    ENERGY_PER_OUTPUT_TOKEN_J,
    ENERGY_PER_REQUEST_J,
    OUTPUT_TOKENS_PER_J,
    GPU_UTIL_MEAN,
    ENERGY_KWH,
    ENERGY_COST_USD,
    ENERGY_USD_PER_MILLION_OUTPUT_TOKENS,
)


Stat = Literal["mean", "median", "std"]
LATENCY_STATS: tuple[Stat, ...] = get_args(Stat)


@dataclass(frozen=True)
class Latency:
    """A latency metric (ms, lower is better): the family of keys `{stat}_{name}_ms`, `p{N}_{name}_ms` in a result.

    label: its name in the rows ("Mean TTFT (ms)"); title: its block in the end-of-run summary; follows: a
    reasoning metric's percentiles are written when this metric's are (--percentile-metrics); doc: what it is,
    in the words of a Prometheus histogram's help."""

    name: str
    applies_to: frozenset[RequestKind]
    label: str
    title: str
    follows: str | None = None
    doc: str = ""
    fmt: str = ".2f"
    better: Better = "lower"

    def key(self, stat: str) -> str:
        """The key of one statistic of this metric: "mean_ttft_ms" (stat: mean, median, std or "p99")."""
        return stat_key(stat, self.name)

    def p(self, p: float) -> str:
        """The key of percentile `p` of this metric: "p99_ttft_ms"."""
        return percentile_key(p, self.name)

    def step(self, p: int) -> str:
        """A sweep step's name for percentile `p` (50 or 99) of this metric: "ttft_p50_ms"."""
        return f"{self.name}_p{p}_ms"

    def stat_label(self, stat: str, upper: bool = False) -> str:
        """A statistic's label: "Mean TTFT (ms)", "P99.9 E2EL (ms)" (the report's tables: upper-case names)."""
        name = self.label.upper() if upper else self.label
        word = {"mean": "Mean", "median": "Median", "std": "Std"}.get(stat) or stat.upper()
        return f"{word} {name} (ms)"


TTFT = Latency("ttft", STREAMED, "TTFT", " Time to First Token ", doc="time to first token")
TPOT = Latency(
    "tpot",
    STREAMED,
    "TPOT",
    " Time per Output Token (excl. 1st token) ",
    doc="time per output token after the first",
)
ITL = Latency(
    "itl",
    STREAMED,
    "ITL",
    " Inter-token Latency ",
    doc="inter-token latency (every gap between output chunks)",
)
E2EL = Latency("e2el", ALL, "E2EL", " End-to-end Latency ", doc="end-to-end latency")
LATENCIES = (TTFT, TPOT, ITL, E2EL)  # vLLM bench serve's metrics (--percentile-metrics names)
# reasoning models: time to the first answer chunk, and the TPOTs while reasoning and of the answer
TTFA = Latency("ttfa", STREAMED, "TTFA", " Time to First Answer Token ", "ttft")
REASONING_TPOT = Latency("reasoning_tpot", STREAMED, "Reasoning TPOT", " TPOT while reasoning ", "tpot")
ANSWER_TPOT = Latency("answer_tpot", STREAMED, "Answer TPOT", " TPOT of the answer (excl. 1st) ", "tpot")
REASONING_LATENCIES = (TTFA, REASONING_TPOT, ANSWER_TPOT)
# the order of the latency metrics in the report's rows and the summary's blocks
ROW_LATENCIES = (TTFT, TTFA, TPOT, REASONING_TPOT, ANSWER_TPOT, ITL, E2EL)
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
            return Key(name, "ms", m.applies_to, m.stat_label(stat, upper=True), m.fmt, better=m.better)
    return None


def rows(compared: bool = False) -> tuple[list[Key], list[Key]]:
    """The declared rows of the report's metric table (`compared`: of the comparison of runs) that go before the
    latency rows and after them, each in its order."""
    keys = sorted(
        (k for k in DECLARED.values() if k.row is not None and (k.compared or not compared)), key=_row
    )
    return [k for k in keys if _row(k) < LATENCY_ROW], [k for k in keys if _row(k) > LATENCY_ROW]


def _row(k: Key) -> int:
    return k.row if k.row is not None else LATENCY_ROW


def better(name: str) -> Better | None:
    """The direction in which a declared metric is better (a latency key: lower); None for a neutral or
    undeclared one."""
    k = declared(name)
    return k.better if k is not None else None


def listed() -> list[Key]:
    """The keys that the end-of-run summary prints by their declaration alone, in their order."""
    return [k for k in DECLARED.values() if k.listed]


# a sweep step's row (sweep.json): (result key, its name there), in the row's order
STEP_FIELDS: tuple[tuple[str, str], ...] = (
    (COMPLETED, "completed"),
    (FAILED, "failed"),
    (DURATION, "duration"),
    (REQUEST_THROUGHPUT, "achieved_rate"),
    (OUTPUT_THROUGHPUT, "output_throughput"),
    (TOTAL_TOKEN_THROUGHPUT, "total_token_throughput"),
    (REQUEST_GOODPUT, "request_goodput"),
    *((key, m.step(p)) for m in LATENCIES for key, p in ((m.key("median"), 50), (m.p(99), 99))),
    (MAX_CONCURRENT_REQUESTS, "max_concurrent_requests"),
)
