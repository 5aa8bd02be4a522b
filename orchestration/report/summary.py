"""The end-of-run summary table, laid out like `vllm bench serve`'s so its users feel at home."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orchestration.report.summary_groups import WIDTH as _W
from orchestration.report.summary_groups import (
    class_lines,
    fleet_lines,
    model_lines,
    session_lines,
    turn_lines,
)
from orchestration.report.summary_groups import line as _line
from vllm_users.client.endpoints import redact_hosts
from vllm_users.measure import client_verdict as cv
from vllm_users.measure import metric_keys as K
from vllm_users.measure.latency_breakdown import breakdown_lines
from vllm_users.measure.run_result import RunResult
from vllm_users.options import Options
from vllm_users.scenarios.registry import ONE_REQUEST_PER_TICKET, parse_mix


def _label(key: str) -> str:
    """A declared metric's label in the summary: "Failures by kind:"."""
    return f"{K.DECLARED[key].console}:"


def _figure(res: Mapping[str, Any], key: str) -> str:
    """The summary's line of a declared metric: its console label and format (an absent one: n/a)."""
    k = K.DECLARED[key]
    return _line(_label(key), res.get(key), "" if k.fmt == "d" else k.fmt)


def _metric_block(res: dict[str, Any], metric: K.Latency) -> list[str]:
    lines = [f"{metric.title:-^{_W}}"]
    for stat in ("mean", "median"):
        lines.append(_line(f"{metric.stat_label(stat)}:", res.get(metric.key(stat)), metric.fmt))
    # like vLLM bench serve: every chosen one, P50 included
    for key, p in K.percentile_keys(res, metric.name):
        lines.append(_line(f"{metric.stat_label(f'p{p}')}:", res[key], metric.fmt))
    return lines


def format_summary(res: dict[str, Any], run_dir: str | None = None) -> str:
    """A human-readable summary of a result dict (result.json's object): the metrics by their declared names
    (vllm_users.measure.metric_keys), the rest through the typed RunResult."""
    run = RunResult.from_json(res)
    out = ["{s:{c}^{n}}".format(s=" vllm-locust Result ", n=_W, c="=")]
    out.extend(load_lines(run))
    out.extend(window_lines(res))
    out.append(_figure(res, K.COMPLETED))
    out.append(_figure(res, K.FAILED))
    if res.get(K.INTERRUPTED):
        out.append(_figure(res, K.INTERRUPTED))
    if run.max_concurrency:
        out.append(_line("Maximum request concurrency:", run.max_concurrency))
    if run.request_rate not in (None, "inf"):
        out.append(_line("Request rate configured (RPS):", run.request_rate, ".2f"))
    out.extend(delivery_lines(res.get(K.DELIVERY)))
    if res.get(K.COMPLETED) or res.get(K.FAILED) or res.get(K.INTERRUPTED):  # no request: no span to speak of
        out.append(_figure(res, K.DURATION))
    out.append(_figure(res, K.TOTAL_INPUT_TOKENS))
    if not _pooling_only(res):  # embeddings/rerank/score generate nothing: no output figures, not zeros
        out.append(_figure(res, K.TOTAL_OUTPUT_TOKENS))
    if K.TOTAL_REASONING_TOKENS in res:  # a reasoning model: its output split in thinking and answer
        est = " (counted from chunks)" if res.get(K.REASONING_TOKENS_ESTIMATED_REQUESTS) else ""
        out.append(_line(_label(K.TOTAL_REASONING_TOKENS), f"{res[K.TOTAL_REASONING_TOKENS]}{est}"))
        out.append(_figure(res, K.TOTAL_ANSWER_TOKENS))
    if res.get(K.TOTAL_IMAGES):  # images: only runs that sent them (a text run shows no image lines)
        out.append(_figure(res, K.MEAN_IMAGES_PER_REQUEST))
        if K.MEAN_IMAGE_TOKENS_PER_REQUEST in res:  # prompt_tokens less the text's count (docs/metrics.md)
            out.append(_figure(res, K.MEAN_IMAGE_TOKENS_PER_REQUEST))
    if res.get(K.COMPLETED):
        out.extend(_rate_and_latency_lines(res))
    else:  # vLLM's fields say 0.00 for them; a figure that does not apply is left out, never shown as 0
        out.append("No request completed: no throughput or latency figures")
    out.extend(_extras(res, run))
    tls = run.meta.get("tls")
    if tls:  # https: how the certificate was checked (--insecure said here, once)
        out.append(
            "TLS: --insecure: the server's certificate was NOT verified"
            if tls.get("insecure")
            else f"TLS: the server's certificate was verified against {tls.get('ca_bundle') or 'the system store'}"
        )
    if run_dir:
        out.append(f"Results: {run_dir}")
    return "\n".join(out)


def requests_total(a: Options) -> int | None:
    """The run's requests when known before it starts: --num-prompts of scenarios whose ticket is one request, in a
    run that the count alone ends (no --run-time, trace, web UI or -f code); None otherwise."""
    if (
        not a.load.num_prompts
        or a.load.run_time
        or a.trace.trace
        or a.processes.web_ui
        or a.scenario.locustfile
    ):
        return None
    try:
        names = [n for n, _ in parse_mix(a.scenario.scenario)] if a.scenario.scenario else ["chat"]
    except ValueError:
        return None
    return a.load.num_prompts if set(names) <= ONE_REQUEST_PER_TICKET else None


_SCENARIO_FIGURE = re.compile(r"^(?P<scenario>.+)_(?P<metric>ttft|tpot)_(?P<p>p\d+)_ms$")


def progress_figures(p: Mapping[str, Any]) -> str:
    """The progress's latency so far, each scenario's labelled as one (`scenario chat TTFT p50/p99 12.1/40.3ms`):
    a traffic class may bear a scenario's name, and these are the scenario's figures, not the class's."""
    by: dict[str, dict[str, dict[str, float]]] = {}
    other = []
    for k, v in p.items():
        m = _SCENARIO_FIGURE.match(k) if k.endswith("_ms") else None
        if m is not None:
            by.setdefault(m["scenario"], {}).setdefault(m["metric"], {})[m["p"]] = float(v)
        elif k.endswith("_ms"):
            other.append(f"{k.replace('_ms', '')} {v:.1f}ms")
    parts = []
    for scen, metrics in by.items():
        figs = [
            f"{metric.upper()} {'/'.join(vals)} {'/'.join(f'{x:.1f}' for x in vals.values())}ms"
            for metric, vals in sorted(metrics.items(), key=lambda mv: mv[0] != "ttft")  # TTFT first
        ]
        parts.append(f"scenario {scen} " + " ".join(figs))
    return "  ".join([*parts, *other])


def progress_line(p: Mapping[str, Any], total: int | None = None) -> str:
    """One line of the run's progress (RUN/progress.json): `ok 27/200` when the total is known, in-flight, tok/s,
    each scenario's TTFT/TPOT percentiles so far and any lost worker."""
    lat = progress_figures(p)
    lost = f"  LOST {','.join(p['workers_lost'])}" if p.get("workers_lost") else ""
    ok = f"{int(p['ok'])}/{total}" if total else f"{int(p['ok'])}"
    return (
        f"[{p['elapsed_s']:7.1f}s] ok {ok}  failed {int(p[K.FAILED])}  in-flight {int(p['inflight'])}  "
        f"{p['output_tok_per_s']:.0f} tok/s  {lat}{lost}"
    )


def _pooling_only(res: dict[str, Any]) -> bool:
    """Every completed request was a pooling one (its result's output figures are None: they do not apply)."""
    return bool(res.get(K.POOLING_REQUESTS)) and res.get(K.TOTAL_OUTPUT_TOKENS) is None


def _rate_and_latency_lines(res: dict[str, Any]) -> list[str]:
    """Throughputs and the latency blocks (a run that completed requests)."""
    out = [_figure(res, K.REQUEST_THROUGHPUT)]
    if res.get(K.REQUEST_GOODPUT) is not None:
        out.append(_figure(res, K.REQUEST_GOODPUT))
        if (res.get(K.GOODPUT) or {}).get(
            "requires_valid"
        ):  # `--goodput ... valid`: the latency-only figure too
            g = res[K.GOODPUT]
            out.append(
                _line(
                    "  latency only (req/s), invalid:",
                    f"{g['request_goodput_latency_only']:.2f}, {g['invalid']} invalid",
                )
            )
    if _pooling_only(res):
        out.append(_figure(res, K.INPUT_THROUGHPUT))
    else:
        out.append(_figure(res, K.OUTPUT_THROUGHPUT))
        out.append(_figure(res, K.MAX_OUTPUT_TOKENS_PER_S))
    out.append(_figure(res, K.MAX_CONCURRENT_REQUESTS))
    out.append(_figure(res, K.TOTAL_TOKEN_THROUGHPUT))
    # the metrics declared `listed`: printed by their declaration alone, when they apply
    out.extend(_figure(res, k.name) for k in K.listed() if res.get(k.name) is not None)
    if _pooling_only(res):
        out.append("Pooling requests (embeddings/rerank/score): no TTFT/ITL/TPOT (E2EL only)")
    elif K.TTFT.key("mean") not in res and res.get(K.NOT_STREAMED_REQUESTS):
        out.append("Requests not streamed: no TTFT/ITL/TPOT (E2EL only)")
    if K.TPOT.key("mean") not in res and res.get(K.DELIVERED_AT_ONCE):  # every stream came in one piece
        out.append("TPOT and ITL absent: delivered at once: a buffering proxy? (TTFT = E2EL)")
    for metric in K.ROW_LATENCIES:
        if metric.key("mean") in res:  # a figure that does not apply is left out (reasoning, non-streamed)
            out.extend(_metric_block(res, metric))
    return out


def delivery_lines(d: Mapping[str, Any] | None) -> list[str]:
    """The load that was applied, over the run's interior (vllm_users.measure.delivered): offered and achieved
    req/s (an open loop), or the achieved rate and concurrency (a closed loop); nothing without an interior."""
    if not d:
        return []
    if d.get("offered_rate") is None:
        return [
            _line(
                "Achieved req/s, in flight (interior):",
                f"{d['achieved_rate']:.2f}, {d['achieved_concurrency']:.1f}",
            )
        ]
    mark = "" if d.get("delivered") else "  NOT DELIVERED"
    out = [
        _line(
            "Offered / achieved req/s (interior):",
            f"{d['offered_rate']:.2f} / {d['achieved_rate']:.2f} ({d['achieved_fraction']:.1%}){mark}",
        )
    ]
    if d.get("goodput_of_offered") is not None:
        out.append(_line("Goodput of the offered load:", f"{d['goodput_of_offered']:.1%}"))
    return out


def load_lines(run: RunResult) -> list[str]:
    """The load that was applied, as vllm bench serve states its rate and concurrency: the loop (N users, or the
    rate, burstiness and cap), the endpoint and host (never a password), the lengths asked and sent."""
    meta = run.meta
    out = []
    loop = load_text(run)
    if loop:
        out.append(_line("Load:", loop))
    host = redact_hosts(str(meta.get("host") or ""))  # result.json's host has none; one from elsewhere may
    if meta.get("endpoint") or host:
        out.append(_line("Endpoint:", " at ".join(str(x) for x in (meta.get("endpoint"), host) if x)))
    lengths = lengths_text(run)
    if lengths:
        out.append(_line("Input / output tokens:", lengths))
    return out


def load_text(run: RunResult) -> str | None:
    """`closed loop of 8 users`, `open loop at 5 req/s, Poisson (burstiness 1), at most 16 in flight`, ...; None
    when the result does not say (one written before the loop was recorded)."""
    meta = run.meta
    loop = meta.get("loop")
    if loop == "closed":
        users = run.max_concurrency or meta.get("users")
        return f"closed loop of {users} users" if users else "closed loop"
    if loop != "open":
        return None
    cap = f"at most {run.max_concurrency} in flight" if run.max_concurrency else "uncapped"
    if run.replay:  # --trace: the trace's own times are the schedule
        return f"open loop: trace replay ({run.replay.get('format')}), {cap}"
    if run.ramp_up_strategy:
        rate = f"{run.ramp_up_strategy} ramp {run.ramp_up_start_rps:g} -> {run.ramp_up_end_rps:g} req/s"
    elif run.request_rate in (None, "inf"):
        return f"open loop, all at once (rate inf), {cap}"
    else:
        rate = f"{float(run.request_rate):g} req/s"
    return f"open loop at {rate}, {arrivals_text(run.burstiness)}, {cap}"


def arrivals_text(burstiness: Any) -> str:
    """The arrival process a burstiness names, as vllm bench serve's gamma gaps make it."""
    if burstiness in ("inf", None) or (isinstance(burstiness, float) and burstiness == float("inf")):
        return "constant gaps"
    b = float(burstiness)
    return f"{'Poisson' if b == 1 else 'gamma'} (burstiness {b:g})"


def lengths_text(run: RunResult) -> str | None:
    """The input/output lengths: what was sent per completed request (mean usage tokens), beside what was asked
    (--input-len / --output-len, for prompts built to a length; a dataset's or trace's own otherwise)."""
    meta = run.meta
    parts = []
    done = run.completed
    if done:
        tin, tout = run.metric(K.TOTAL_INPUT_TOKENS), run.metric(K.TOTAL_OUTPUT_TOKENS)
        sent = f"{tin / done:.1f}" if tin is not None else "n/a"
        sent += f" / {tout / done:.1f}" if tout is not None else ""  # pooling: no output
        parts.append(f"{sent} mean")
    if meta.get("dataset"):
        parts.append(f"from the dataset {meta['dataset']}")
    elif run.replay:
        parts.append("from the trace")
    elif meta.get("input_len") is not None:
        ratio = f", range ratio {meta['range_ratio']:g}" if meta.get("range_ratio") else ""
        parts.append(f"asked {meta['input_len']} / {meta.get('output_len')}{ratio}")
    return "; ".join(parts) or None


def window_lines(res: dict[str, Any]) -> list[str]:
    """The warm-up / cool-down windows left out of the statistics (nothing when none was asked)."""
    w = res.get(K.WINDOWS) or {}
    out = []
    for name, label in (("warmup", "Warm-up"), ("cooldown", "Cool-down")):
        if name in w:
            b = w[name]
            span = f", {b['start_s']:.1f}-{b['end_s']:.1f} s" if b.get("requests") else ""
            out.append(_line(f"{label} excluded ({b['spec']}):", f"{b['requests']} requests{span}"))
    if w:
        m = w["measured"]
        span = f", {m['start_s']:.1f}-{m['end_s']:.1f} s" if m.get("requests") else ""
        out.append(_line("Measured window:", f"{m['requests']} requests{span}"))
    return out


def _extras(res: dict[str, Any], run: RunResult) -> list[str]:
    out = [f"{' Run health ':-^{_W}}"]
    arr = res.get(K.ARRIVALS) or {}
    if arr.get("scheduled"):
        out.append(
            _line(
                "Arrivals scheduled / sent / dropped:",
                f"{arr['scheduled']} / {arr['sent']} / {arr['dropped']}",
            )
        )
        out.append(_line("Late arrivals (> 10 ms):", arr.get("late")))
        lag = arr.get("schedule_lag_ms") or {}
        lag_text = " / ".join("n/a" if lag.get(k) is None else f"{lag[k]:.2f}" for k in ("p99", "max"))
        out.append(_line("Schedule lag p99 / max (ms):", lag_text))
        ttft_i = arr.get("ttft_from_intended_ms") or {}
        out.append(_line("TTFT from intended start p99 (ms):", ttft_i.get("p99"), ".2f"))
    out.extend(replay_lines(run.replay))
    out.extend(session_lines(run.sessions))
    out.extend(turn_lines(run.ttft_by_turn, bool(res.get(K.CACHED_TOKENS_REPORTED))))
    if res.get(K.ERRORS_BY_KIND):
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(res[K.ERRORS_BY_KIND].items()))
        out.append(_line(_label(K.ERRORS_BY_KIND), kinds))
    for e in res.get(K.ERROR_MESSAGES) or []:  # the server's own words, most frequent first
        out.append(f"  {e['count']:>6} x {e['kind']}: {e.get('message') or '(no message)'}")
    for span in res.get(K.SERVER_UNREACHABLE) or []:  # the server went away (refused or reset connections)
        until = "until the run ended" if span.get("to_end") else "then answered again"
        out.append(
            _line(
                _label(K.SERVER_UNREACHABLE),
                f"from t = {span['from_s']:.1f} s for {span['for_s']:.1f} s "
                f"({span['failures']} connection failures; {until})",
            )
        )
    if res.get(K.PREFIX_CACHE_HIT_RATE) is not None:
        out.append(_figure(res, K.PREFIX_CACHE_HIT_RATE))
    if res.get(K.VALIDITY_RATE) is not None:
        out.append(_figure(res, K.VALIDITY_RATE))
    if res.get(K.CHUNK_TOKEN_RATIO) is not None:
        out.append(_figure(res, K.CHUNK_TOKEN_RATIO))
    if res.get(K.MISSING_DONE_REQUESTS):  # successes all the same: complete bodies with a finish_reason
        out.append(_figure(res, K.MISSING_DONE_REQUESTS))
    if d := res.get(K.DELIVERED_AT_ONCE):  # their chunk gaps time a proxy: no TPOT/ITL from them
        out.append(
            _line("Delivered at once (a buffering proxy?):", f"{d['requests']} of {d['streamed_requests']}")
        )
    if u := res.get(K.USAGE_BELOW_CHUNKS):  # an impossible pair: the chunks were counted
        told = f"{u['requests']} (usage {u['usage_output_tokens']} tokens, chunks {u['chunk_output_tokens']})"
        out.append(_line("Usage below chunks (chunks counted):", told))
    if res.get(K.COMPRESSED_STREAMS):  # against Accept-Encoding: identity; decoded as the bytes came
        enc = ", ".join(f"{k}={v}" for k, v in sorted(res[K.COMPRESSED_STREAMS].items()))
        out.append(_line(_label(K.COMPRESSED_STREAMS), enc))
    out.extend(client_lines(run.client_health))
    out.extend(breakdown_lines(run.latency_breakdown))
    loss = run.data_loss or {}
    for w in loss.get("workers_lost", []):
        out.append(
            f"WORKER LOST: {w['worker']}: {w['records_received']} records received; "
            f"up to {w['possible_loss_window_s']} s of its samples may be missing"
        )
    if run.missing_vs_server is not None:
        out.append(_line("Requests served but not recorded:", run.missing_vs_server))
    if len(run.per_scenario) > 1:
        out.append(f"{' Per scenario ':-^{_W}}")
        for name, s in run.per_scenario.items():
            if (ttft := K.TTFT.key("median")) in s:
                tpot = s.get(K.TPOT.key("median"))  # absent when every stream came at once
                lat = f"TTFT p50 {s[ttft]:8.1f} ms  TPOT p50 " + (
                    f"{tpot:7.2f} ms" if tpot is not None else "    n/a"
                )
                if (ttfa := K.TTFA.key("median")) in s:
                    lat += f"  TTFA p50 {s[ttfa]:8.1f} ms"
            else:
                lat = f"not streamed: no TTFT/ITL  E2EL p50 {s[K.E2EL.key('median')]:8.1f} ms"
            out.append(f"scenario {name:<14} ok {s[K.COMPLETED]:>6}  failed {s[K.FAILED]:>4}  {lat}")
    out.extend(class_lines(run.classes))
    out.extend(model_lines(run.per_model))
    out.extend(fleet_lines(run.per_endpoint, run.per_replica))
    prof = run.profile
    if prof:
        state = (
            "traces written by the server" if prof.get("profiled") else f"not profiled: {prof.get('error')}"
        )
        out.append(_line("Server profile (--profile):", state))
    if run.cost:
        from vllm_users.measure.cost import format_cost

        out.append(f"{' Cost ':-^{_W}}")
        out.extend(format_cost(run.cost))
    if run.energy:
        from vllm_users.measure.energy_lines import format_energy

        out.append(f"{' GPU energy ':-^{_W}}")
        out.extend(format_energy(run.energy))
    for w in run.warnings:
        out.append(f"WARNING: {w}")
    out.append("=" * _W)
    return out


def client_lines(health: Mapping[str, Any] | None) -> list[str]:
    """The client's health: the busiest worker's CPU and loop lag, the run's verdict (client_verdict: our CPU, our
    code, the machine, or too short to judge), and what it rests on and what to do."""
    if not health:
        return []
    rows = list((health.get("workers") or {}).values())
    cpus = [w["cpu_mean"] for w in rows if w.get("cpu_mean") is not None]
    lags = [w["loop_lag_p99_ms"] for w in rows if w.get("loop_lag_p99_ms") is not None]
    figures = f"{max(cpus):.0%}" if cpus else "n/a"
    figures += f", {max(lags):.1f} ms" if lags else ", n/a"
    verdict = cv.verdict_of(health)
    out = [
        _line(
            "Client (max worker CPU, loop lag p99):",
            f"{figures} -> {cv.TEXT[verdict] if verdict else cv.NOT_MEASURED}",
        )
    ]
    worst = cv.worst_worker(health, verdict)
    if verdict not in (None, "ok") and worst is not None:
        name, row = worst
        advice = cv.ADVICE[verdict] if verdict != "too_short" else ""
        out.append(f"  {name}: {cv.evidence(row, verdict)}" + (f"; {advice}" if advice else ""))
    return out


def replay_lines(rep: Mapping[str, Any] | None) -> list[str]:
    """--trace: how faithfully the trace was replayed (nothing for a run without a trace)."""
    if not rep:
        return []
    scale = f" x{rep['time_scale']:g}" if rep.get("time_scale") not in (None, 1, 1.0) else ""
    out = [f"{' Replay fidelity ':-^{_W}}", _line("Trace:", f"{rep.get('format')}{scale} {rep.get('trace')}")]
    out.append(
        _line(
            "Trace requests / sent / not sent:",
            f"{rep['trace_requests']} / {rep['sent']} / {rep['not_sent']}",
        )
    )
    lag = rep.get("lag_ms")
    out.append(
        _line(
            "Send lag vs trace p50 / p99 (ms):", None if not lag else f"{lag['p50']:.2f} / {lag['p99']:.2f}"
        )
    )
    if rep.get("expected_block_reuse") is not None:
        hit = rep.get("server_prefix_hit_rate")
        out.append(
            _line(
                "Block reuse (trace) / server hits:",
                f"{rep['expected_block_reuse']:.1%} / " + ("n/a" if hit is None else f"{hit:.1%}"),
            )
        )
    return out
