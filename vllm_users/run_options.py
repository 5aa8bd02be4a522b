"""The run-level option groups with no feature package below orchestration: where the settings come from,
capacity planning, and the run directory's outputs (Options composes them, and vllm_users never imports
orchestration)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.errors import UsageError
from vllm_users.option_spec import BOTH, RUN, WORKER, opt


@dataclass(frozen=True)
class SourceOptions:
    """Where the run's settings come from (run/worker)."""

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


@dataclass(frozen=True)
class CapacityOptions:
    """Capacity planning (run): sweeps, the max-rate search, cost, repeats."""

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
        "--find-max-rate (and a --sweep with --goodput): the percentile of each SLO metric that must be within "
        "its limit",
        RUN,
    )
    max_error_rate: float = opt(
        0.01,
        T.fraction,
        "--find-max-rate (and a --sweep with --goodput): most failures a passing step may have, as a fraction",
        RUN,
    )
    search_steps: int = opt(8, T.pos_int, "--find-max-rate: most steps, the probe included", RUN)
    search_tolerance: float = opt(
        0.025,
        T.pos_float,
        "--find-max-rate: stop when the passing and failing rates are this close (relative)",
        RUN,
    )
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

    def check(self) -> None:
        """The capacity options' own rule (UsageError with one line): --concurrency-sweep is the older
        spelling of --sweep concurrency:..., so not both."""
        if self.concurrency_sweep and self.sweep:
            raise UsageError("--concurrency-sweep is --sweep concurrency:...: give one of them")


@dataclass(frozen=True)
class OutputOptions:
    """The run directory and what is written, the server's /metrics, the embedded simulator."""

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
    server_metrics: tuple[str, ...] = opt(
        (),
        T.text,
        "Prometheus endpoint sampled every 2 s (default HOST/metrics; http://user:pass@... sends Basic auth); "
        "repeatable: each replica's own /metrics, one samples file and latency breakdown each",
        RUN,
        repeat=True,
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
    twin: str = opt(
        "",
        T.text,
        "Twin profile (vllm-locust calibrate -o twin.json): without --host the embedded "
        "simulator serves with its constants (--sim-args still override)",
        RUN,
        metavar="FILE",
    )
    quiet: bool = opt(False, None, "No progress lines", RUN)
