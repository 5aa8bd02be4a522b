"""The run-level option groups whose feature lives in orchestration (Options composes them, and vllm_users never
imports orchestration): where the settings come from (settings.config), what the run writes and prints
(launch), the server's /metrics sampled and its preflight (server), the embedded simulator (capacity.steps)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.option_spec import RUN, WORKER, opt

__all__ = ["OutputOptions", "PreflightOptions", "ScrapeOptions", "SimulatorOptions", "SourceOptions"]


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
class OutputOptions:
    """What the run writes and prints: its directory, the result file and line, the report, progress lines."""

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
    quiet: bool = opt(False, None, "No progress lines", RUN)


@dataclass(frozen=True)
class ScrapeOptions:
    """The server's /metrics, sampled every 2 s during the run (orchestration.server.metrics_sampler)."""

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


@dataclass(frozen=True)
class PreflightOptions:
    """What the preflight does to the server before the load (orchestration.server.preflight)."""

    reset_prefix_cache: bool = opt(
        False,
        None,
        "POST /reset_prefix_cache in the preflight (before the load): a run "
        "does not hit the prefix cache an earlier run filled with the same prompts (vLLM "
        "serves it with VLLM_SERVER_DEV_MODE=1; a 404 is a warning)",
        RUN,
    )
    wait_for_server: float | None = opt(
        None,
        T.duration,
        "Wait this long for a server that refuses connections or answers 502/503/504 (still starting) "
        "before the preflight fails; one line per wait (none: fail at once)",
        RUN,
    )


@dataclass(frozen=True)
class SimulatorOptions:
    """The embedded simulator a run without --host starts (orchestration.capacity.steps)."""

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
