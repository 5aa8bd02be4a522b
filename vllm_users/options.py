"""The option table: every option of vllm-locust, declared once, and the typed, frozen options object.

Each field of `Options` is one option: its name (flag `--input-len`, env `VLLM_LOCUST_INPUT_LEN`, config-file
key `input_len` or `input-len`), type, default, validation (the parser in `Spec.parse`), help, and the
scopes it belongs to:
- LOCUST: registered on Locust's parser (plain `locust -f`, and the master and workers `vllm-locust run` starts);
- RUN / WORKER: the `vllm-locust run` / `vllm-locust worker` command lines (orchestration.config); `k8s render`
  takes run's.
Options in both LOCUST and RUN travel from `vllm-locust run` to its master (`locust_argv`), and from the master
to its workers inside Locust's spawn message. Every Locust process holds one `Options` (`from_namespace`).
Environment switches that are not options (read where they act) are listed in ENV_SWITCHES.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_users import option_types as T
from vllm_users.client.responses import APIS
from vllm_users.measure.metrics import DEFAULT_METRIC_PERCENTILES, DEFAULT_PERCENTILE_METRICS
from vllm_users.workload.classes import class_text
from vllm_users.workload.datasets import FORMATS
from vllm_users.workload.images import FORMATS as IMAGE_FORMATS
from vllm_users.workload.schemas import COMPLEXITIES

# API keys never travel as options (Locust shows options in its UI and ships them to workers):
# they come from these environment variables on every process.
API_KEY_ENV = ("VLLM_LOCUST_API_KEY", "OPENAI_API_KEY")
ENV_PREFIX = "VLLM_LOCUST_"
JSON_MODES = ("response_format", "structured_outputs", "guided_json")
# environment-only switches (not options: no flag, no config key), documented with the table in docs/options.md
ENV_SWITCHES = {
    "VLLM_LOCUST_WEB_PASSWORD": "--web-login: the one user's password (user name from VLLM_LOCUST_WEB_USER, "
    "default admin); never written",
    "VLLM_LOCUST_GC_FREEZE": "1: gc.freeze() on each worker after spawning (default off; docs/metrics.md)",
    "VLLM_LOCUST_GC_GEN0": "N: the young-generation GC threshold of each worker (default 5000; 0: Python's 700)",
    "VLLM_LOCUST_MASTER_TIMEOUT": "seconds a worker waits for a silent master before saving its records and exiting",
    "VLLM_LOCUST_WORKER_DIR": "where a worker keeps its local records (set by `vllm-locust worker`)",
    "VLLM_LOCUST_REACTOR": "0: each stream's greenlet reads its own socket (default 1: one epoll reactor per worker)",
    "VLLM_LOCUST_KERNEL_TIMESTAMPS": "0: no SO_TIMESTAMPNS receive timestamps (default 1 where Linux has them)",
    "VLLM_LOCUST_RESOLVED_MODEL": "the model id the result names when --model is empty",
    "VLLM_LOCUST_API_KEY / OPENAI_API_KEY": "the API key (never an option: Locust would show and ship it)",
    "VLLM_LOCUST_METRICS_HEADERS": "(set by `vllm-locust run` for its master) the /metrics scrape's headers as JSON; "
    "never written",
}
METRICS_HEADERS_ENV = "VLLM_LOCUST_METRICS_HEADERS"


def env_api_key() -> str | None:
    """The API key from the environment (API_KEY_ENV, first set wins), or None."""
    return next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)


LOCUST, RUN, WORKER = "locust", "run", "worker"
CALIBRATE = "calibrate"  # `vllm-locust calibrate` takes these few (the TLS ones)
BOTH = (LOCUST, RUN)


@dataclass(frozen=True)
class Spec:
    """How one option is parsed, shown and routed (the metadata of an `Options` field)."""

    parse: Callable[[str], Any] | None  # text -> value, raising a one-line error; None: an on/off switch
    help: str
    scopes: tuple[str, ...]
    choices: tuple[str, ...] | None = None
    short: str = ""  # e.g. -u
    metavar: str | None = None
    many: bool = False  # run: several words joined by spaces (--goodput ttft:500 tpot:50)
    repeat: bool = False  # run: repeatable, a tuple (--header A --header B)
    locust_name: str = ""  # its name on Locust's parser when it differs (Locust owns --stop-timeout)
    web_ui: bool = True  # shown in Locust's web UI
    secret: bool = False  # never written anywhere (the command line is redacted)


def opt(default: Any, parse: Callable[[str], Any] | None, help: str, *scopes: str, **kw: Any) -> Any:
    """A table row: a dataclass field carrying its Spec (a secret stays out of the object's repr)."""
    spec = Spec(parse, help, scopes, **kw)
    return field(default=default, repr=not spec.secret, metadata={"spec": spec})


@dataclass(frozen=True)
class Options:
    """Every option of vllm-locust with its value; built once per process (Locust: per test), never mutated."""

    # ----- where the run's settings come from (run/worker) -----
    config: str = opt(
        "",
        T.text,
        "YAML/JSON file of option: value (worker: the master's file; it runs its users)",
        RUN,
        WORKER,
        metavar="FILE",
    )
    preset: str | None = opt(
        None, T.text, "Defaults for a scene of the tuning guide (docs/scenarios.md)", RUN, metavar="NAME"
    )
    # ----- server -----
    host: str = opt(
        "", T.text, "Server base URL, e.g. http://127.0.0.1:8000 (none: start the simulator)", RUN
    )
    model: str = opt(
        "",
        T.text,
        "Served model name (none: the only model of /v1/models); a mix by weight, e.g. "
        "base:3,adapter-a:1 (LoRA adapters; docs/classes.md)",
        *BOTH,
    )
    api_key: str = opt(
        "", T.text, "API key (or env VLLM_LOCUST_API_KEY / OPENAI_API_KEY); never written", RUN, secret=True
    )
    # ----- TLS (https:// hosts: the load, the preflight, /metrics, calibration; docs/https.md) -----
    ca_bundle: str = opt(
        "",
        T.text,
        "PEM file of the CAs that sign the server's certificate (default: SSL_CERT_FILE, "
        "else the system's store)",
        *BOTH,
        CALIBRATE,
        metavar="FILE",
        web_ui=False,
    )
    insecure: bool = opt(
        False,
        None,
        "Do not verify the server's certificate (said in the summary and the result)",
        *BOTH,
        CALIBRATE,
        web_ui=False,
    )
    client_cert: str = opt(
        "",
        T.text,
        "PEM client certificate for mTLS (its key in it, or --client-key)",
        *BOTH,
        CALIBRATE,
        metavar="FILE",
        web_ui=False,
    )
    client_key: str = opt(
        "", T.text, "PEM private key of --client-cert", *BOTH, CALIBRATE, metavar="FILE", web_ui=False
    )
    # ----- endpoints: Responses, embeddings, rerank and score (docs/scenarios.md) -----
    endpoint: str = opt(
        "chat",
        T.text,
        "OpenAI API to call (embeddings, rerank, score: the pooling users)",
        *BOTH,
        choices=APIS,
    )
    embed_batch: int = opt(
        1, T.pos_int, "--endpoint embeddings: inputs per request (a list input when > 1)", *BOTH
    )
    rerank_docs: int = opt(4, T.pos_int, "--endpoint rerank/score: documents per query", *BOTH)
    scenario: str = opt(
        "",
        T.text,
        "Scenario or weighted mix, e.g. chat or chat:3,json:1; a user class: "
        "package.module:Class (none: chat, or only -f's users)",
        RUN,
        WORKER,
    )
    locustfile: str = opt(
        "",
        T.text,
        "Your locustfile: its LLMUser subclasses run (beside --scenario, when given)",
        RUN,
        WORKER,
        short="-f",
        metavar="FILE",
    )
    # ----- load -----
    users: int | None = opt(None, T.pos_int, "Closed loop: concurrent users (default 8)", RUN, short="-u")
    spawn_rate: float | None = opt(None, T.pos_float, "Users started per second", RUN, short="-r")
    request_rate: float | None = opt(
        None, T.rate, "Open loop: requests/s over all workers (or inf; none or 0: closed loop)", *BOTH
    )
    burstiness: float = opt(
        1.0,
        T.pos_float,
        "Gamma shape of inter-arrivals: 1 = Poisson, <1 burstier, inf = constant intervals 1/rate",
        *BOTH,
    )
    max_concurrency: int | None = opt(
        None, T.pos_int, "Cap on in-flight requests over all workers (open loop)", *BOTH
    )
    num_prompts: int | None = opt(
        None,
        T.pos_int,
        "Total requests (or sessions) over all workers (run: default "
        "200 without --run-time; locust: until --run-time)",
        *BOTH,
    )
    run_time: float | None = opt(
        None, T.duration, "Stop after this long (30s, 5m; web UI: from the first swarm)", RUN, short="-t"
    )
    ramp_up_strategy: str | None = opt(
        None,
        T.text,
        "Open loop: ramp the rate from --ramp-up-start-rps to "
        "--ramp-up-end-rps over --num-prompts requests, as vllm bench serve does",
        *BOTH,
        choices=("linear", "exponential"),
    )
    ramp_up_start_rps: float | None = opt(None, T.pos_float, "Ramp: rate of the first request", *BOTH)
    ramp_up_end_rps: float | None = opt(None, T.pos_float, "Ramp: rate of the last request", *BOTH)
    # ----- trace replay: --trace FILE sends each request of the file at its own timestamp -----
    trace: str = opt(
        "",
        T.text,
        "Replay a trace: each request at its timestamp on the open-loop schedule "
        "(docs/traces.md); every worker reads the file from this path",
        *BOTH,
        metavar="FILE",
    )
    trace_format: str = opt(
        "auto",
        T.text,
        "--trace's format (auto: from the file)",
        *BOTH,
        choices=("auto", "mooncake", "azure", "burstgpt", "jsonl", "records"),
    )
    time_scale: float = opt(
        1.0, T.pos_float, "--trace: replay speed (2 = twice as fast: offsets halved)", *BOTH, metavar="X"
    )
    trace_start: float = opt(
        0.0, T.nonneg_float, "--trace: skip the trace's first S seconds", *BOTH, metavar="S"
    )
    trace_duration: float | None = opt(
        None, T.pos_float, "--trace: replay D seconds of it (from --trace-start)", *BOTH, metavar="D"
    )
    trace_block_size: int = opt(512, T.pos_int, "--trace mooncake: prompt tokens per hash id", *BOTH)
    trace_timestamp_unit: str = opt(
        "auto",
        T.text,
        "--trace: unit of a mooncake/burstgpt/jsonl `timestamp` (auto: the format's own)",
        *BOTH,
        choices=("auto", "s", "ms", "us"),
    )
    # ----- requests -----
    input_len: int = opt(128, T.pos_int, "Prompt tokens per request", *BOTH)
    output_len: int = opt(128, T.pos_int, "max_tokens per request", *BOTH)
    range_ratio: float = opt(0.0, T.ratio, "Lengths vary uniformly by +-ratio (vLLM's)", *BOTH)
    ignore_eos: bool = opt(False, None, "Send ignore_eos (exact output lengths)", *BOTH)
    temperature: float = opt(0.0, T.nonneg_float, "Sampling temperature", *BOTH)
    seed: int = opt(0, T.nonneg_int, "Seed for prompts, schemas and arrivals", *BOTH)
    no_stream: bool = opt(
        False, None, "Non-streamed requests: E2EL and usage tokens, no TTFT/ITL/TPOT", *BOTH
    )
    header: tuple[str, ...] = opt(
        (),
        T.header,
        "Extra header of every request (repeatable): the preflight, the "
        "load, /metrics on the host, --profile; e.g. a gateway's credential (never "
        "written, docs/auth.md) or the simulator's X-Sim-Fault",
        RUN,
        repeat=True,
        metavar="'NAME: VALUE'",
        secret=True,
    )
    # ----- prompts and scenarios -----
    tokenizer: str = opt("", T.text, "Local tokenizer directory for exact prompt lengths", *BOTH)
    dataset: str = opt("", T.text, "ShareGPT JSON or JSONL file of prompts", *BOTH)
    dataset_format: str = opt("auto", T.text, "Dataset format", *BOTH, choices=FORMATS)
    prefix_len: int = opt(0, T.nonneg_int, "Shared system-prompt tokens (prefix caching)", *BOTH)
    cache_rate: float = opt(0.0, T.fraction, "Fraction of requests that start with a shared prefix", *BOTH)
    num_prefixes: int = opt(1, T.pos_int, "How many distinct shared prefixes (K)", *BOTH)
    num_turns: int = opt(4, T.pos_int, "multi-turn: turns per conversation", *BOTH)
    tool_choice: str = opt("required", T.text, "tools: auto | required | <function name>", *BOTH)
    tool_followup: bool = opt(False, None, "tools: send the tool result back and measure the answer", *BOTH)
    schema_complexity: str = opt(
        "mixed", T.text, "json: generated schemas' shape", *BOTH, choices=COMPLEXITIES
    )
    json_schema: str = opt("", T.text, "json: a JSON Schema file to use instead of generated schemas", *BOTH)
    json_mode: str = opt("response_format", T.text, "json: how to ask for JSON", *BOTH, choices=JSON_MODES)
    burst_quiet_users: int = opt(
        0, T.nonneg_int, "burst: users while quiet (0 = max(1, spike users / 8))", *BOTH
    )
    burst_spike_users: int = opt(0, T.nonneg_int, "burst: users during the spike (0 = --users)", *BOTH)
    burst_quiet: float = opt(10.0, T.nonneg_float, "burst: seconds of quiet before the spike", *BOTH)
    burst_spike: float = opt(5.0, T.pos_float, "burst: seconds the spike lasts", *BOTH)
    burst_recover: float = opt(10.0, T.nonneg_float, "burst: seconds of quiet after the spike", *BOTH)
    burst_cycles: int = opt(1, T.pos_int, "burst: how many quiet/spike/recover cycles", *BOTH)
    # ----- images: vision-language load, chat only -----
    images: int = opt(
        0,
        T.nonneg_int,
        "Images per chat request, as image_url content parts (--scenario vision: at least 1)",
        *BOTH,
        metavar="N",
    )
    image_size: str = opt(
        "512x512",
        T.image_sizes,
        "Image sizes, each image's drawn by weight (vLLM's random-mm buckets), e.g. 512x512:3,1024x768:1",
        *BOTH,
        metavar="WxH[:W],...",
    )
    image_format: str = opt(
        "png", T.text, "Encoding of the images sent as data URLs", *BOTH, choices=IMAGE_FORMATS
    )
    image_url_base: str = opt(
        "",
        T.url_base,
        "Send image URLs BASE/img_<w>x<h>_<k>.png for the server to fetch instead of data URLs",
        *BOTH,
        metavar="URL",
    )
    # ----- traffic classes (docs/classes.md) -----
    class_: tuple[str, ...] = opt(
        (),
        class_text,
        "A traffic class (repeatable): NAME:weight=W[,scenario=S][,model=M]"
        "[,priority=P][,ttft=MS][,tpot=MS][,e2el=MS]; per-class goodput and fairness",
        RUN,
        repeat=True,
        metavar="NAME:weight=W,...",
    )
    vllm_classes: str = opt(
        "",
        T.text,
        "(set by `vllm-locust run` from --class) the traffic classes as JSON",
        LOCUST,
        web_ui=False,
    )
    # ----- measurement -----
    goodput: str = opt(
        "",
        T.goodput,
        "SLOs: ttft:MS tpot:MS e2el:MS; add `valid` to count a wrong answer (json, "
        "tools, a check hook) as a miss",
        *BOTH,
        many=True,
    )
    warmup: str = opt(
        "",
        T.window,
        "Requests in the first 30 s (or the first 200) are kept in the records but left "
        "out of the statistics",
        *BOTH,
        metavar="30s|200r",
    )
    cooldown: str = opt(
        "",
        T.window,
        "Requests that end in the last 30 s (or the last 200) are left out of the statistics",
        *BOTH,
        metavar="30s|200r",
    )
    percentile_metrics: str = opt(
        ",".join(DEFAULT_PERCENTILE_METRICS),
        T.percentile_metrics,
        "Metrics whose percentiles the result reports (vLLM's): any of ttft,tpot,itl,e2el",
        *BOTH,
    )
    metric_percentiles: str = opt(
        ",".join(f"{p:g}" for p in DEFAULT_METRIC_PERCENTILES),
        T.metric_percentiles,
        'Percentiles reported for those metrics (vLLM\'s), e.g. "50,90,99,99.9"',
        *BOTH,
    )
    stop_timeout: float = opt(
        30.0,
        T.nonneg_float,
        "Seconds in-flight streams get to finish at stop",
        *BOTH,
        locust_name="vllm_stop_timeout",
    )
    stream_timeout: float = opt(120.0, T.pos_float, "Read timeout per recv of a stream, seconds", *BOTH)
    fail_on_client_bound: bool = opt(
        False,
        None,
        "Exit 5 when the load generator was the bottleneck (default: flag it in the result only)",
        *BOTH,
    )
    records_at_end: bool = opt(
        False,
        None,
        "Workers send histograms and counters every second but keep their "
        "records on disk; the master collects the record files at the end (past one "
        "master's ingest ceiling, docs/scale.md)",
        *BOTH,
    )
    # ----- capacity planning (run) -----
    concurrency_sweep: str = opt(
        "", T.text, "Run once per concurrency, e.g. 1,2,4,8 (= --sweep concurrency:...)", RUN
    )
    sweep: str = opt(
        "",
        T.text,
        "One run per step (a run directory each) and one report with latency-vs-rate "
        "curves; auto = synchronous, throughput, then 5 rates between (auto:N for N)",
        RUN,
        metavar="rates:1,2,4|concurrency:1,8,32|auto",
    )
    find_max_rate: bool = opt(
        False,
        None,
        "Search the highest open-loop rate at which the --goodput SLO holds (a probe, then bisection)",
        RUN,
    )
    slo_percentile: float = opt(
        99.0,
        T.percentile,
        "--find-max-rate: the percentile of each SLO metric that must be within its limit",
        RUN,
    )
    max_error_rate: float = opt(
        0.01, T.fraction, "--find-max-rate: most failures a passing rate may have, as a fraction", RUN
    )
    search_steps: int = opt(8, T.pos_int, "--find-max-rate: most steps, the probe included", RUN)
    search_tolerance: float = opt(
        0.025,
        T.pos_float,
        "--find-max-rate: stop when the passing and failing rates are this close (relative)",
        RUN,
    )
    # the master puts these into the result it writes: they travel to it (LOCUST), hidden from Locust's web UI
    gpu_hour_price: float | None = opt(
        None,
        T.pos_float,
        "Price of one GPU-hour: adds $ per million output tokens and $ per request",
        *BOTH,
        metavar="USD",
        web_ui=False,
    )
    gpus: int = opt(1, T.pos_int, "GPUs the deployment uses (with --gpu-hour-price)", *BOTH, web_ui=False)
    profile: bool = opt(
        False,
        None,
        "POST the server's /start_profile and /stop_profile around the load (vLLM with --profiler-config)",
        *BOTH,
        locust_name="vllm_profile",
        web_ui=False,
    )
    repeats: int = opt(
        1,
        T.pos_int,
        "Run N times (one directory each): every metric's mean and 95 % CI; compare with `report A B`",
        RUN,
        metavar="N",
    )
    # ----- processes -----
    workers: int | None = opt(None, T.nonneg_int, "Local worker processes (default: one per core)", RUN)
    expect_workers: int | None = opt(None, T.pos_int, "Wait for this many workers (remote too)", RUN)
    master_bind_host: str = opt("127.0.0.1", T.text, "Where remote workers connect", RUN)
    master_host: str = opt("", T.text, "Address of the `vllm-locust run` master (required)", WORKER)
    master_port: int | None = opt(None, T.pos_int, "Master port (run: a free one; worker: 5557)", RUN, WORKER)
    processes: int = opt(1, T.pos_int, "Worker processes on this host", WORKER)
    web_ui: bool = opt(False, None, "Locust's web UI for live ramping instead of headless", RUN)
    web_port: int = opt(8089, T.port, "Port of the web UI", RUN)
    web_host: str = opt("127.0.0.1", T.text, "Interface of the web UI (default: this machine only)", RUN)
    web_login: bool = opt(
        False,
        None,
        "Locust's --web-login: one user, password from VLLM_LOCUST_WEB_PASSWORD (docs/web_ui.md)",
        RUN,
    )
    # ----- outputs -----
    output_dir: str = opt("results", T.text, "Parent of the run directory", RUN)
    run_name: str = opt("", T.text, "Run directory name (default: timestamp-scenario)", RUN)
    output_file: str = opt(
        "",
        T.text,
        "Also write the result JSON (vLLM's field names) here; with --repeats the "
        "repeats summary (repeats.json: every metric's mean and CI), with --sweep, "
        "--find-max-rate or sweep-server the sweep.json",
        RUN,
    )
    print_result: bool = opt(
        False,
        None,
        "End with one line 'VLLM_LOCUST_RESULT {json}': the result leaves a pod through its log",
        RUN,
    )
    no_report: bool = opt(False, None, "Skip the HTML/Markdown report", RUN)
    server_metrics: str = opt(
        "",
        T.text,
        "Prometheus endpoint sampled every 2 s (default HOST/metrics; http://user:pass@... sends Basic auth)",
        RUN,
        metavar="URL",
    )
    metrics_header: tuple[str, ...] = opt(
        (),
        T.header,
        "Header of the /metrics scrape (repeatable), instead of "
        "--header's: a /metrics elsewhere or behind other credentials (docs/"
        "auth.md); never written",
        RUN,
        repeat=True,
        metavar="'NAME: VALUE'",
        secret=True,
    )
    no_server_metrics: bool = opt(False, None, "Do not sample the server's /metrics", RUN)
    prometheus_port: int | None = opt(
        None,
        T.port,
        "Serve live metrics at http://MASTER:PORT/metrics for "
        "Prometheus and Grafana, from the master (docs/prometheus.md)",
        *BOTH,
        metavar="PORT",
        web_ui=False,
    )
    reset_prefix_cache: bool = opt(
        False,
        None,
        "POST /reset_prefix_cache in the preflight (before the load): a run "
        "does not hit the prefix cache an earlier run filled with the same prompts (vLLM "
        "serves it with VLLM_SERVER_DEV_MODE=1; a 404 is a warning)",
        RUN,
    )
    sim_args: str = opt(
        "", T.text, "Extra flags for the embedded simulator, e.g. '--fixed --ttft-ms 50'", RUN
    )
    # twin of a real server (docs/twin.md): the embedded simulator serves with a calibrated profile
    twin: str = opt(
        "",
        T.text,
        "Twin profile (vllm-locust calibrate -o twin.json): without --host the embedded "
        "simulator serves with its constants (--sim-args still override)",
        RUN,
        metavar="FILE",
    )
    quiet: bool = opt(False, None, "No progress lines", RUN)
    # ----- set by `vllm-locust run` or the master, for the Locust processes -----
    results_dir: str = opt(
        "", T.text, "Run directory the master writes records and results into", LOCUST, web_ui=False
    )
    extra_headers: str = opt(
        "", T.text, "JSON object of extra request headers", LOCUST, web_ui=False, secret=True
    )
    vllm_worker_count: int = opt(0, T.nonneg_int, "(set by the master)", LOCUST, web_ui=False)
    vllm_embedded_sim: bool = opt(
        False,
        None,
        "(set by `vllm-locust run`) the host is its embedded simulator: "
        "the result cross-checks the requests it served",
        LOCUST,
        web_ui=False,
    )
    vllm_lengths: str = opt(
        "",
        T.text,
        "(set by `vllm-locust run`'s preflight, or a plain master at test start) the "
        "prompt-length calibration as JSON: workers use it and send no probes",
        LOCUST,
        web_ui=False,
    )

    @property
    def open_loop(self) -> bool:
        """True when arrivals follow a schedule (--request-rate or --trace given)."""
        return self.request_rate is not None or bool(self.trace)


def table(scope: str | None = None) -> Iterator[tuple[str, Spec, Any]]:
    """(name, spec, default) of every option, or of those in `scope`."""
    for f in dataclasses.fields(Options):
        spec: Spec = f.metadata["spec"]
        if scope is None or scope in spec.scopes:
            yield f.name, spec, f.default


SPECS: dict[str, Spec] = {name: spec for name, spec, _ in table()}
DEFAULTS: dict[str, Any] = {name: default for name, _, default in table()}


def flag(name: str) -> str:
    """The command-line flag of option `name`: --input-len."""
    return "--" + name.rstrip("_").replace("_", "-")  # class_ (a Python keyword otherwise) is --class


def env_name(name: str) -> str:
    """The environment variable of option `name`: VLLM_LOCUST_INPUT_LEN."""
    return ENV_PREFIX + name.rstrip("_").upper()


def coerce(name: str, raw: Any) -> Any:
    """A value for option `name` from text or a config-file value; argparse.ArgumentTypeError when invalid."""
    spec = SPECS[name]
    if spec.parse is None:
        return T.switch(raw)
    if spec.repeat or spec.many:
        items = [str(x) for x in raw] if isinstance(raw, list | tuple) else [_text(raw)]
        if spec.many:
            items = [" ".join(items)]
        values = [_one(spec, x) for x in items]
        return tuple(values) if spec.repeat else values[0]
    return _one(spec, raw if isinstance(raw, str) else _text(raw))


def _text(raw: Any) -> str:
    return "inf" if raw == float("inf") else str(raw)


def _one(spec: Spec, text: str) -> Any:
    value = spec.parse(text) if spec.parse is not None else T.switch(text)
    if spec.choices is not None and value not in spec.choices:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(spec.choices)}")
    return value


def _unset(raw: Any) -> bool:
    """Locust's stand-ins for 'not given' of an option whose default is None: '', 0 (its web UI sends text)."""
    return (
        raw is None
        or (isinstance(raw, str) and raw.strip() in ("", "0", "0.0", "None"))
        or (not isinstance(raw, bool | str) and raw == 0)
    )


def _locust_type(spec: Spec, default: Any) -> Callable[[str], Any]:
    """The parser Locust gets: the table's, with 'not given' (0, '') allowed where the default is None (such an
    option's choices are checked here: Locust's web UI would show them as a list with the first one chosen)."""
    assert spec.parse is not None
    if default is not None:
        return spec.parse
    table_parse, choices = spec.parse, spec.choices

    def parse(text: str) -> Any:
        if _unset(text):
            return None
        value = table_parse(text)
        if choices is not None and value not in choices:  # argparse's own words, as the run parser says it
            raise argparse.ArgumentTypeError(
                f"invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})"
            )
        return value

    parse.__name__ = table_parse.__name__
    return parse


def add_locust_options(parser: Any) -> None:
    """Register the LOCUST options on Locust's parser (init_command_line_parser listener)."""
    for name, spec, default in table(LOCUST):
        kw: dict[str, Any] = {
            "env_var": env_name(spec.locust_name or name),
            "default": default,
            "help": spec.help.replace("%", "%%"),
            "include_in_web_ui": spec.web_ui,
        }
        if spec.parse is None:
            kw["action"] = "store_true"
        else:
            kw["type"] = _locust_type(spec, default)
        if spec.choices is not None and default is not None:
            kw["choices"] = spec.choices
        parser.add_argument(flag(spec.locust_name or name), **kw)


def from_namespace(ns: Any) -> Options:
    """The typed options of a Locust process from its parsed namespace (values checked again: the web UI and
    the master's spawn message set them as text or as they come); ArgumentTypeError when one is bad."""
    given = vars(ns) if ns is not None else {}
    values: dict[str, Any] = {}
    for name, spec, default in table(LOCUST):
        key = spec.locust_name or name
        if key not in given:
            continue
        raw = given[key]
        if default is None and _unset(raw):
            values[name] = None
        elif raw is None:
            values[name] = default
        else:
            try:
                values[name] = coerce(name, raw)
            except argparse.ArgumentTypeError as e:
                raise argparse.ArgumentTypeError(f"{flag(key)}: {e}") from None
    return Options(**values)


def locust_argv(o: Options, **set_by_run: Any) -> list[str]:
    """Our options as a Locust command line: every option the run shares with Locust that is not at its default,
    and the Locust-only ones `vllm-locust run` sets (`set_by_run`: results_dir, model, extra_headers; they win)."""
    out: list[str] = []
    for name, spec, default in table(LOCUST):
        if RUN not in spec.scopes and name not in set_by_run:
            continue
        v = set_by_run[name] if name in set_by_run else getattr(o, name)
        if v is None or v is False or v == default:
            continue
        f = flag(spec.locust_name or name)
        out += [f] if spec.parse is None else [f, _text(v)]
    return out


def option_env_names() -> Mapping[str, str]:
    """env name -> option name, for every option."""
    return {env_name(name): name for name, _, _ in table()}
