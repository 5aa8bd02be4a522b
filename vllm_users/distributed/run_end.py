"""The master's end of a run: the load has ended; stop the server's profiler, then build the one typed result.

Order: load ends (drain) -> --profile's /stop_profile -> result built (metrics, run health, exit code, the
server's count of the requests it served, the prefix-cache warning, --gpu-hour-price's cost) -> result.json written
once. Nothing rewrites it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict
from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner

from vllm_users import exit_codes, run_dir
from vllm_users.atomic import atomic_json
from vllm_users.client import stdlib_http
from vllm_users.client.endpoints import endpoint_labels, primary_host, redact_hosts
from vllm_users.client.tls import TLSConfig
from vllm_users.distributed import user_errors
from vllm_users.distributed.env_state import locust_option
from vllm_users.distributed.options import HandoffOptions
from vllm_users.distributed.server_profile import ServerProfile, profile_line
from vllm_users.distributed.server_scrape import around_load, around_load_more
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.measure import metric_keys as K
from vllm_users.measure.cost import run_cost
from vllm_users.measure.energy_run import run_energy
from vllm_users.measure.health import summarize
from vllm_users.measure.options import MeasureOptions
from vllm_users.measure.result_builder import result_from_dir
from vllm_users.measure.result_notes import calibration_warning, dataset_reuse_note, no_completed_reason
from vllm_users.measure.run_result import RunResult
from vllm_users.measure.server_counters import LoadCounters, prefix_cache_warning, prompt_cache_hits
from vllm_users.measure.windows import parse_optional
from vllm_users.options import METRICS_HEADERS_ENV, METRICS_HEADERS_MORE_ENV, Options, env_api_key
from vllm_users.redact import with_api_key

log = logging.getLogger("vllm_locust")


def start_profile(o: Options, host: str | None) -> ServerProfile | None:
    """--profile: the server's profiler started as the load starts (after a time-based --warmup); else None."""
    if not o.capacity.profile or not host:
        return None
    warm = parse_optional(o.measure.warmup)
    profile = ServerProfile(
        primary_host(host), request_headers(o.handoff), delay_s=(warm.seconds or 0.0) if warm else 0.0
    )
    profile.start()
    return profile


def request_headers(o: HandoffOptions) -> dict[str, str]:
    """Every request's credentials in a Locust process: --header's (its extra_headers) and the API key's Bearer."""
    return with_api_key(dict(o.extra_headers), env_api_key())


def metrics_headers() -> dict[str, str]:
    """The /metrics scrape's headers `vllm-locust run` handed its master (METRICS_HEADERS_ENV), or none."""
    try:
        h = json.loads(os.environ.get(METRICS_HEADERS_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in h.items()} if isinstance(h, dict) else {}


def stop_profile(profile: ServerProfile | None, results_dir: str) -> dict[str, Any] | None:
    """Stop the profiler (the load has ended), keep what happened in RUN/profile.json; the result's block."""
    if profile is None:
        return None
    info = profile.stop()
    atomic_json(run_dir.path(results_dir, run_dir.PROFILE), info)
    log.info("vllm-locust: %s", profile_line(info))
    return info


def sim_served(host: str) -> int | None:
    """Completion requests the embedded simulator answered (its /sim/stats), or None when it does not say."""
    try:
        with stdlib_http.urlopen(host.rstrip("/") + "/sim/stats", timeout=5) as resp:
            stats = json.load(resp)
    except (OSError, ValueError):
        return None
    served = stats.get("generate_requests")  # completion requests received, not /v1/models or /metrics hits
    return int(served) if isinstance(served, int) else None


def preflight_requests(results_dir: str) -> int:
    """The preflight's completion requests to the server (RUN/preflight.json: its stream attempts and the length
    calibration's usage probes; 1 when unknown)."""
    try:
        with open(run_dir.path(results_dir, run_dir.PREFLIGHT)) as fh:
            doc = json.load(fh)
        by_path = (doc.get("calibration") or {}).get("requests_by_path") or {}
        probes = sum(int(n) for p, n in by_path.items() if p in ("/v1/chat/completions", "/v1/completions"))
        return len(doc["stream_attempts"]) + probes
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 1


def with_server_served(
    res: RunResult, o: HandoffOptions, results_dir: str, host: str | None, counters: LoadCounters | None
) -> RunResult:
    """server_served and missing_vs_server: the embedded simulator's count of completion requests less the
    preflight's, else the increase of the server's vllm:request_success_total over the load (its baseline was
    scraped after the preflight); unchanged (both None) when the server does not say."""
    if (
        len(endpoint_labels(host or "")) > 1
    ):  # one server's counter is a share of a fleet's load: no cross-check
        return res
    embedded = bool(o.vllm_embedded_sim and host)
    served = sim_served(str(host)) if embedded else counters.served if counters is not None else None
    if served is None:
        return res
    load = served - preflight_requests(results_dir) if embedded else served  # preflight requests are not load
    return res.replace(server_served=served, missing_vs_server=max(0, load - recorded_all(res)))


def metrics_headers_more() -> dict[str, dict[str, str]]:
    """The headers of each further --server-metrics URL `vllm-locust run` handed its master, by URL, or none."""
    try:
        h = json.loads(os.environ.get(METRICS_HEADERS_MORE_ENV) or "{}")
    except ValueError:
        return {}
    if not isinstance(h, dict):
        return {}
    return {str(u): {str(k): str(v) for k, v in hs.items()} for u, hs in h.items() if isinstance(hs, dict)}


def with_latency_breakdown(res: RunResult, results_dir: str, counters: LoadCounters | None) -> RunResult:
    """latency_breakdown: where the client's TTFT goes, from each scraped server's histograms over the load
    (`counters`: the first URL's, then every further --server-metrics URL's), each against the client's figures
    over the requests that server answered where the records tell; unchanged without a scrape."""
    from vllm_users.measure.latency_breakdown import client_latency, latency_breakdown, url_rows
    from vllm_users.measure.records_store import load_columns

    loads = [counters] if counters is not None else []
    loads += around_load_more(results_dir, headers=metrics_headers_more())
    if not loads:
        return res
    c, health = load_columns(results_dir), res.client_health
    host = str(res.meta.get("host") or "")
    own = [None if (i := url_rows(c, ld.url, host)) is None else client_latency(c, health, i) for ld in loads]
    block = latency_breakdown(loads, client_latency(c, health), own)
    return res if block is None else res.replace(latency_breakdown=block)


def recorded_all(res: RunResult) -> int:
    """Requests sent and recorded in the whole run: the measured window's, plus --warmup's and --cooldown's."""
    windows = res.metric(K.WINDOWS) or {}
    return res.recorded + sum(
        int((windows.get(k) or {}).get("requests") or 0) for k in ("warmup", "cooldown")
    )


def exit_code_of(res: RunResult, o: MeasureOptions, collector: Collector, base: int) -> int:
    """The run's exit code: `base` raised by failures, dropped arrivals, a client-bound run (when asked) and
    lost data (aborted when every worker was lost)."""
    code = base
    if res.failed:
        code = max(code, exit_codes.FAILURES)
    if res.dropped:
        code = max(code, exit_codes.SCHEDULE)
    if res.client_bound and o.fail_on_client_bound:
        code = max(code, exit_codes.CLIENT_BOUND)
    if res.data_loss is not None and not res.data_loss["complete"]:
        code = max(code, exit_codes.DATA_LOSS)
        if collector.workers and all(w.lost_at is not None for w in collector.workers.values()):
            code = max(code, exit_codes.ABORTED)  # nobody finished: partial results only
    if not res.completed and not res.failed:  # nothing measured (all failed: FAILURES says it already)
        code = max(code, exit_codes.NOTHING_MEASURED)
    return code


def interruption(results_dir: str, seen: str | None) -> str | None:
    """The signal that stopped the run: the one `vllm-locust run` got (it forwards SIGTERM whichever it got, and
    names it in RUN/interrupted.json), else `seen` by the master itself, else None."""
    said = run_dir.read_json_or_none(results_dir, run_dir.INTERRUPTED)
    return str(said.get("signal") or "a signal") if isinstance(said, dict) else seen


def note_faults(
    meta: dict[str, Any], collector: Collector, write_error: str | None, stopped_by: str | None
) -> int:
    """Note in `meta` what went wrong beside the requests: exceptions of user code (`user_errors`), a write that
    failed (`write_error`: a full disk), the signal that stopped the run (`interrupted_by`); the exit code they call
    for at least (the verdict on the requests may raise it)."""
    code = exit_codes.OK
    raised = user_errors.merge(w.totals.get("user_errors") or [] for w in collector.workers.values())
    if raised:  # never a success: the user's code failed
        meta["user_errors"] = raised
        code = max(code, exit_codes.FAILURES)
    if write_error:
        meta["write_error"] = write_error
        code = max(code, exit_codes.WRITE_FAILED)
    if stopped_by:
        meta["interrupted_by"] = stopped_by
        code = max(code, exit_codes.INTERRUPTED)
    return code


def with_fault_warnings(res: RunResult, collector: Collector) -> RunResult:
    """The result with one warning per fault note_faults noted (its meta): what a user must read beside the figures."""
    said: list[str] = []
    if res.meta.get("write_error"):  # what the workers sent, less what reached the disk: lost with the write
        lost = max(0, sum(w.records for w in collector.workers.values()) - recorded_all(res))
        said.append(
            f"{res.meta['write_error']}: the run stopped; the results cover the records written before it "
            f"({lost} received were not written)"
        )
    if res.meta.get("interrupted_by"):
        said.append(
            f"interrupted by {res.meta['interrupted_by']}: the run stopped before its end; the results cover "
            "what was measured until then"
        )
    raised = user_errors.summary_line(list(res.meta.get("user_errors") or []))
    if raised:
        log.error("vllm-locust: %s", raised)
        said.append(raised)
    return res.replace(warnings=(*res.warnings, *said)) if said else res


def final_result(
    results_dir: str,
    meta: dict[str, Any],
    o: Options,
    collector: Collector,
    *,
    timeline: list[dict[str, Any]],
    base_code: int,
    host: str | None,
    profile: dict[str, Any] | None,
) -> RunResult:
    """The run's one result: the records' metrics, run health, exit code, server cross-check, profile, cost."""
    health = summarize(collector.health)
    res = result_from_dir(results_dir, meta).replace(
        client_health=health,
        data_loss=collector.loss_report(),
        client_bound=health["client_bound"],
        timeline=timeline,
    )
    res = res.replace(exit_code=exit_code_of(res, o.measure, collector, base_code))
    counters = around_load(
        results_dir, headers=metrics_headers()
    )  # the server's /metrics before the load and now (None: not sampled)
    res = with_server_served(res, o.handoff, results_dir, host, counters)
    res = with_latency_breakdown(res, results_dir, counters)
    # after the server's count: "no load request was sent" only where the server says none reached it
    said = [w for w in (calibration_warning(meta), no_completed_reason(res)) if w and w not in res.warnings]
    if said:
        res = res.replace(warnings=(*res.warnings, *said))
    warning = prefix_cache_warning(
        counters,
        dict(res.metrics),
        list(res.per_scenario),
        bool(o.prompt.dataset or (o.prefix.prefix_len and o.prefix.cache_rate)),
        (meta.get("prompt_calibration") or {}).get("overhead_tokens"),
    )
    if warning:
        log.warning("vllm-locust: %s", warning)
        res = res.replace(warnings=(*res.warnings, warning))
    reused = _dataset_reuse(o, res, counters)
    if reused:
        log.warning("vllm-locust: %s", reused)
        res = res.replace(warnings=(*res.warnings, reused))
    if o.trace.trace:  # how faithfully the trace was replayed
        res = res.replace(replay=trace_replay(results_dir, o, counters))
    res = res.replace(sessions=run_sessions(results_dir, o))
    if profile is not None:
        res = res.replace(profile=profile)
    if o.capacity.gpu_hour_price:
        res = res.replace(cost=run_cost(res.metrics, o.capacity.gpu_hour_price, o.capacity.gpus))
    energy = run_energy(results_dir, meta, res.metrics, o.gpu.energy_price)  # None: no --gpu-metrics
    return res.replace(energy=energy) if energy is not None else res


def _dataset_reuse(o: Options, res: RunResult, counters: LoadCounters | None) -> str | None:
    """The note of a --dataset with fewer prompts than requests (a multi-turn run's conversations are its
    sessions, not one prompt a request: not judged here)."""
    if not o.prompt.dataset or "multi-turn" in res.per_scenario:
        return None
    from vllm_users.workload.datasets import dataset_size

    return dataset_reuse_note(
        o.prompt.dataset,
        dataset_size(o.prompt.dataset, o.prompt.dataset_format),
        int(res.completed or 0) + int(res.failed or 0),
        prompt_cache_hits(counters, dict(res.metrics)),
    )


def trace_replay(results_dir: str, o: Options, counters: LoadCounters | None) -> dict[str, Any]:
    """result.json's `replay` of a --trace run: its records against the trace (read again here, once)."""
    from vllm_users.measure.records_store import load_columns
    from vllm_users.measure.replay_fidelity import replay_fidelity, server_hit_rate
    from vllm_users.workload.trace_formats import trace_block_reuse
    from vllm_users.workload.trace_schedule import plan_of

    plan = plan_of(o.trace, o.load.num_prompts)
    trace = plan.trace
    mooncake = any(r.hash_ids for r in trace.requests)
    about = {
        "trace": o.trace.trace,
        "format": trace.format,
        "time_scale": o.trace.time_scale,
        "window": {
            "start_s": o.trace.trace_start,
            "duration_s": o.trace.trace_duration,
            "limit": o.load.num_prompts,
        },
        "trace_duration_s": trace.duration_s,
        "block_size": trace.block_size if mooncake else None,
        "skipped": dict(trace.skipped),
    }
    return replay_fidelity(
        load_columns(results_dir),
        trace=about,
        trace_requests=trace.calls,  # a session graph's waits are not requests
        scheduled=len(plan.entries),
        expected_reuse=trace_block_reuse(trace) if mooncake else None,
        hit_rate=server_hit_rate(counters) if mooncake else None,
    )


def run_sessions(results_dir: str, o: Options) -> dict[str, Any] | None:
    """result.json's `sessions`: a trace's sessions against the calls each makes, or the synthetic agents'
    sessions that started (`--scenario agent`: each one's seeded graph says its calls); None for neither."""
    from vllm_users.measure.records_store import load_columns
    from vllm_users.measure.session_metrics import session_metrics
    from vllm_users.workload.session_graph import graph_of
    from vllm_users.workload.synthetic_agents import AGENT_SCENARIO, agent_session
    from vllm_users.workload.trace_schedule import plan_of

    if o.trace.trace:
        return session_metrics(
            load_columns(results_dir), plan_of(o.trace, o.load.num_prompts).session_calls()
        )
    columns = load_columns(results_dir)  # (the master is not told the scenario mix: its records say it)
    agents = columns.a["scenario"] == columns.code("scenario", AGENT_SCENARIO)
    started = sorted(set(columns.a["session"][agents].tolist()) - {-1})
    seed = o.request.seed
    expected = {s: graph_of(agent_session(o.agents, seed, s)).calls for s in started}
    return session_metrics(columns, expected)


def run_meta(
    o: Options,
    env: Environment,
    t_start: float,
    run_time: float | None = None,
    timeline: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The run's settings, as the result JSON header needs them (never the API key); `run_time`: --run-time, which
    the master counts itself (Locust's option is cleared); `timeline`: the run's user changes (the web UI's)."""
    runner = env.runner
    ramp = o.load.ramp_up_strategy
    users = locust_option(env, "num_users")
    meta: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.localtime(t_start)),
        "started_at": t_start,
        "host": redact_hosts(env.host or "") or None,
        "model_id": o.server.model or os.environ.get("VLLM_LOCUST_RESOLVED_MODEL"),
        "tokenizer_id": o.prompt.tokenizer or None,
        "endpoint": o.scenario.endpoint,
        "backend": "openai-chat" if o.scenario.endpoint == "chat" else "openai",
        "num_prompts": o.load.num_prompts or None,
        "request_rate": o.load.request_rate if o.open_loop and not ramp else None,
        "burstiness": o.load.burstiness,
        # vllm bench serve's field: its cap on requests in flight. A closed loop of N users is that cap (N, the
        # most the web UI set); an open loop has --max-concurrency's, or none (null: uncapped)
        "max_concurrency": (o.load.max_concurrency or None)
        if o.open_loop
        else closed_loop_users(users, timeline or []),
        "loop": "open" if o.open_loop else "closed",
        "dataset": os.path.basename(o.prompt.dataset)
        if o.prompt.dataset
        else None,  # its lengths, not --input-len
        "input_len": o.request.input_len,
        "output_len": o.request.output_len,
        "range_ratio": o.request.range_ratio,
        "seed": o.request.seed,
        # the body's sampling seed (--sampling-seed; None: none sent, the default)
        "sampling_seed": o.request.sampling_seed if o.request.sampling_seed >= 0 else None,
        # what the prompts share, so a report can judge the prefix-cache hit rate against what they allow
        "prefix_len": o.prefix.prefix_len or None,
        "cache_rate": o.prefix.cache_rate if o.prefix.prefix_len else None,
        "num_prefixes": o.prefix.num_prefixes if o.prefix.prefix_len else None,
        "goodput": o.measure.goodput or None,
        "classes": [asdict(c) for c in o.classes.vllm_classes] or None,  # the --class table
        "ramp_up_strategy": ramp or None,
        "ramp_up_start_rps": o.load.ramp_up_start_rps if ramp else None,
        "ramp_up_end_rps": o.load.ramp_up_end_rps if ramp else None,
        "warmup": o.measure.warmup or None,
        "cooldown": o.measure.cooldown or None,
        "percentile_metrics": o.measure.percentile_metrics or None,
        "metric_percentiles": o.measure.metric_percentiles or None,
        "users": users,
        "run_time": run_time or locust_option(env, "run_time"),
        "workers": (o.handoff.vllm_worker_count or runner.worker_count)
        if isinstance(runner, MasterRunner)
        else 1,
        "user_classes": sorted({u.__name__ for u in env.user_classes}),
        "tls": TLSConfig.of(o.server).metadata()
        if (env.host or "").startswith("https://")
        else None,  # --insecure said
    }
    labels = endpoint_labels(env.host or "")
    if len(labels) > 1:  # several --host URLs: their labels, per_endpoint's order (one server: no key)
        meta["endpoints"] = labels
    return meta


def closed_loop_users(users: Any, timeline: list[dict[str, Any]]) -> int | None:
    """The most users a closed loop ran: Locust's user count, or the largest the web UI set on the timeline."""
    seen = [u for u in (users, *(e.get("users") for e in timeline)) if isinstance(u, int | float) and u > 0]
    return int(max(seen)) if seen else None


def locust_html_report(env: Environment) -> None:
    """Locust's own --html report, as a headless run leaves it (its web UI mode writes none on SIGTERM)."""
    path = locust_option(env, "html_file")
    if not path:
        return
    from locust.html import get_html_report

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(get_html_report(env, show_download_link=False))
    except OSError as e:
        log.warning("vllm-locust: Locust's HTML report not written: %s", e)
