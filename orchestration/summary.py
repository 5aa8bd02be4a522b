"""The end-of-run summary table, laid out like `vllm bench serve`'s so its users feel at home."""

from __future__ import annotations

from typing import Any

_W = 50


def _line(label: str, value: Any, fmt: str = "") -> str:
    if value is None:
        text = "n/a"
    elif fmt:
        text = format(value, fmt)
    else:
        text = str(value)
    return f"{label:<40}{text:<10}"


def percentile_keys(res: dict[str, Any], metric: str) -> list[tuple[str, str]]:
    """(key, "99.9") of the `p{N}_{metric}_ms` fields in `res`, in its order (the run's --metric-percentiles)."""
    tail = f"_{metric}_ms"
    # the middle must be a number: p99_tpot_ms is TPOT's, p99_answer_tpot_ms is not
    return [(k, k[1 : -len(tail)]) for k in res
            if k.startswith("p") and k.endswith(tail) and k[1 : -len(tail)].replace(".", "", 1).isdigit()]


def _metric_block(res: dict[str, Any], metric: str, title: str) -> list[str]:
    lines = [f"{title:-^{_W}}"]
    name = metric.replace("_", " ").upper().replace("REASONING", "Reasoning").replace("ANSWER", "Answer")
    lines.append(_line(f"Mean {name} (ms):", res.get(f"mean_{metric}_ms"), ".2f"))
    lines.append(_line(f"Median {name} (ms):", res.get(f"median_{metric}_ms"), ".2f"))
    for key, p in percentile_keys(res, metric):  # like vLLM bench serve: every chosen one, P50 included
        lines.append(_line(f"P{p} {name} (ms):", res[key], ".2f"))
    return lines


def format_summary(res: dict[str, Any], run_dir: str | None = None) -> str:
    """A human-readable summary of a result dict."""
    out = ["{s:{c}^{n}}".format(s=" vllm-locust Result ", n=_W, c="=")]
    out.extend(window_lines(res))
    out.append(_line("Successful requests:", res.get("completed")))
    out.append(_line("Failed requests:", res.get("failed")))
    if res.get("interrupted"):
        out.append(_line("Interrupted requests:", res.get("interrupted")))
    if res.get("max_concurrency"):
        out.append(_line("Maximum request concurrency:", res.get("max_concurrency")))
    if res.get("request_rate") not in (None, "inf"):
        out.append(_line("Request rate configured (RPS):", res.get("request_rate"), ".2f"))
    if res.get("completed") or res.get("failed") or res.get("interrupted"):  # no request: no span to speak of
        out.append(_line("Benchmark duration (s):", res.get("duration"), ".2f"))
    out.append(_line("Total input tokens:", res.get("total_input_tokens")))
    if not _pooling_only(res):  # embeddings/rerank/score generate nothing: no output figures, not zeros
        out.append(_line("Total generated tokens:", res.get("total_output_tokens")))
    if "total_reasoning_tokens" in res:  # a reasoning model: its output split in thinking and answer
        est = " (counted from chunks)" if res.get("reasoning_tokens_estimated_requests") else ""
        out.append(_line("Reasoning tokens:", f"{res['total_reasoning_tokens']}{est}"))
        out.append(_line("Answer tokens:", res.get("total_answer_tokens")))
    if res.get("total_images"):  # images (issue 23.2): only runs that sent them
        out.append(_line("Images per request:", res.get("mean_images_per_request"), ".2f"))
        if "mean_image_tokens_per_request" in res:  # prompt_tokens less the text's count (docs/metrics.md)
            out.append(_line("Image tokens per request (est.):", res["mean_image_tokens_per_request"], ".1f"))
    if res.get("completed"):
        out.extend(_rate_and_latency_lines(res))
    else:  # vLLM's fields say 0.00 for them; a figure that does not apply is left out, never shown as 0
        out.append("No request completed: no throughput or latency figures")
    out.extend(_extras(res))
    tls = (res.get("meta") or {}).get("tls")
    if tls:  # https: how the certificate was checked (--insecure said here, once)
        out.append("TLS: --insecure: the server's certificate was NOT verified" if tls.get("insecure") else
                   f"TLS: the server's certificate was verified against {tls.get('ca_bundle') or 'the system store'}")
    if run_dir:
        out.append(f"Results: {run_dir}")
    return "\n".join(out)


def _pooling_only(res: dict[str, Any]) -> bool:
    """Every completed request was a pooling one (its result has no output figures: None, issue 23.3)."""
    return bool(res.get("pooling_requests")) and res.get("total_output_tokens") is None


def _rate_and_latency_lines(res: dict[str, Any]) -> list[str]:
    """Throughputs and the latency blocks (a run that completed requests)."""
    out = [_line("Request throughput (req/s):", res.get("request_throughput"), ".2f")]
    if res.get("request_goodput") is not None:
        out.append(_line("Request goodput (req/s):", res.get("request_goodput"), ".2f"))
        if (res.get("goodput") or {}).get("requires_valid"):  # `--goodput ... valid`: the latency-only figure too
            g = res["goodput"]
            out.append(_line("  latency only (req/s), invalid:", f"{g['request_goodput_latency_only']:.2f}, "
                             f"{g['invalid']} invalid"))  # fmt: skip
    if _pooling_only(res):
        out.append(_line("Input token throughput (tok/s):", res.get("input_throughput"), ".2f"))
    else:
        out.append(_line("Output token throughput (tok/s):", res.get("output_throughput"), ".2f"))
        out.append(_line("Peak output token throughput (tok/s):", res.get("max_output_tokens_per_s"), ".2f"))
    out.append(_line("Peak concurrent requests:", res.get("max_concurrent_requests")))
    out.append(_line("Total token throughput (tok/s):", res.get("total_token_throughput"), ".2f"))
    if _pooling_only(res):
        out.append("Pooling requests (embeddings/rerank/score): no TTFT/ITL/TPOT (E2EL only)")
    elif "mean_ttft_ms" not in res and res.get("not_streamed_requests"):
        out.append("Requests not streamed: no TTFT/ITL/TPOT (E2EL only)")
    for metric, title in (
        ("ttft", " Time to First Token "),
        ("ttfa", " Time to First Answer Token "),
        ("tpot", " Time per Output Token (excl. 1st token) "),
        ("reasoning_tpot", " TPOT while reasoning "),
        ("answer_tpot", " TPOT of the answer (excl. 1st) "),
        ("itl", " Inter-token Latency "),
        ("e2el", " End-to-end Latency "),
    ):
        if f"mean_{metric}_ms" in res:  # a figure that does not apply is left out (reasoning, non-streamed)
            out.extend(_metric_block(res, metric, title))
    return out


def window_lines(res: dict[str, Any]) -> list[str]:
    """The warm-up / cool-down windows left out of the statistics (nothing when none was asked)."""
    w = res.get("windows") or {}
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


def _extras(res: dict[str, Any]) -> list[str]:
    out = [f"{' Run health ':-^{_W}}"]
    arr = res.get("arrivals") or {}
    if arr.get("scheduled"):
        out.append(_line("Arrivals scheduled / sent / dropped:", f"{arr['scheduled']} / {arr['sent']} / {arr['dropped']}"))
        out.append(_line("Late arrivals (> 10 ms):", arr.get("late")))
        lag = arr.get("schedule_lag_ms") or {}
        lag_text = " / ".join("n/a" if lag.get(k) is None else f"{lag[k]:.2f}" for k in ("p99", "max"))
        out.append(_line("Schedule lag p99 / max (ms):", lag_text))
        ttft_i = arr.get("ttft_from_intended_ms") or {}
        out.append(_line("TTFT from intended start p99 (ms):", ttft_i.get("p99"), ".2f"))
    out.extend(replay_lines(res.get("replay")))
    if res.get("errors_by_kind"):
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(res["errors_by_kind"].items()))
        out.append(_line("Failures by kind:", kinds))
    for e in res.get("error_messages") or []:  # the server's own words, most frequent first
        out.append(f"  {e['count']:>6} x {e['kind']}: {e.get('message') or '(no message)'}")
    if res.get("prefix_cache_hit_rate") is not None:
        out.append(_line("Prefix cache hit rate (usage):", res["prefix_cache_hit_rate"], ".1%"))
    if res.get("validity_rate") is not None:
        out.append(_line("Valid outputs (json/tools):", res["validity_rate"], ".1%"))
    if res.get("chunk_token_ratio") is not None:
        out.append(_line("Chunks per output token:", res["chunk_token_ratio"], ".3f"))
    if res.get("missing_done_requests"):  # successes all the same: complete bodies with a finish_reason
        out.append(_line("Streams without [DONE] (complete):", res["missing_done_requests"]))
    if res.get("compressed_streams"):  # against Accept-Encoding: identity; decoded as the bytes came
        enc = ", ".join(f"{k}={v}" for k, v in sorted(res["compressed_streams"].items()))
        out.append(_line("Compressed by the server (decoded):", enc))
    health = res.get("client_health") or {}
    if health:
        cpu = max((w["cpu_mean"] for w in health.get("workers", {}).values()), default=0.0)
        lag = max((w["loop_lag_p99_ms"] for w in health.get("workers", {}).values()), default=0.0)
        verdict = "CLIENT-BOUND: numbers include client delay" if health.get("client_bound") else "ok"
        out.append(_line("Client (max worker CPU, loop lag p99):", f"{cpu:.0%}, {lag:.1f} ms -> {verdict}"))
    loss = res.get("data_loss") or {}
    for w in loss.get("workers_lost", []):
        out.append(f"WORKER LOST: {w['worker']}: {w['records_received']} records received; "
                   f"up to {w['possible_loss_window_s']} s of its samples may be missing")  # fmt: skip
    if res.get("missing_vs_server") is not None:
        out.append(_line("Requests served but not recorded:", res["missing_vs_server"]))
    if len(res.get("per_scenario") or {}) > 1:
        out.append(f"{' Per scenario ':-^{_W}}")
        for name, s in res["per_scenario"].items():
            if "median_ttft_ms" in s:
                lat = f"TTFT p50 {s['median_ttft_ms']:8.1f} ms  TPOT p50 {s['median_tpot_ms']:7.2f} ms"
                if "median_ttfa_ms" in s:
                    lat += f"  TTFA p50 {s['median_ttfa_ms']:8.1f} ms"
            else:
                lat = f"not streamed: no TTFT/ITL  E2EL p50 {s['median_e2el_ms']:8.1f} ms"
            out.append(f"{name:<14} ok {s['completed']:>6}  failed {s['failed']:>4}  {lat}")
    out.extend(class_lines(res.get("classes")))
    prof = res.get("profile")
    if prof:
        state = "traces written by the server" if prof.get("profiled") else f"not profiled: {prof.get('error')}"
        out.append(_line("Server profile (--profile):", state))
    if res.get("cost"):
        from vllm_users.measure.cost import format_cost

        out.append(f"{' Cost ':-^{_W}}")
        out.extend(format_cost(res["cost"]))
    for w in res.get("warnings") or []:
        out.append(f"WARNING: {w}")
    out.append("=" * _W)
    return out


def replay_lines(rep: dict[str, Any] | None) -> list[str]:
    """--trace: how faithfully the trace was replayed (nothing for a run without a trace)."""
    if not rep:
        return []
    scale = f" x{rep['time_scale']:g}" if rep.get("time_scale") not in (None, 1, 1.0) else ""
    out = [f"{' Replay fidelity ':-^{_W}}", _line("Trace:", f"{rep.get('format')}{scale} {rep.get('trace')}")]
    out.append(_line("Trace requests / sent / not sent:",
                     f"{rep['trace_requests']} / {rep['sent']} / {rep['not_sent']}"))  # fmt: skip
    lag = rep.get("lag_ms")
    out.append(_line("Send lag vs trace p50 / p99 (ms):", None if not lag else f"{lag['p50']:.2f} / {lag['p99']:.2f}"))
    if rep.get("expected_block_reuse") is not None:
        hit = rep.get("server_prefix_hit_rate")
        out.append(_line("Block reuse (trace) / server hits:", f"{rep['expected_block_reuse']:.1%} / "
                         + ("n/a" if hit is None else f"{hit:.1%}")))  # fmt: skip
    return out


def _ms(v: Any) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def class_lines(block: dict[str, Any] | None) -> list[str]:
    """Traffic classes (issue 22): per class its weight against the capacity it got, latency, goodput against
    its own SLO; then Jain's fairness index (nothing for a run without classes)."""
    if not block:
        return []
    out = [f"{' Per class ':-^{_W}}",
           f"{'class':<12} {'weight':>6} {'got':>5} {'ok':>6} {'fail':>4} {'tok/s':>8} {'TTFT p50/p99 ms':>17} "
           f"{'TPOT p99':>8} {'E2EL p99':>9} {'goodput':>8} {'good':>5}  SLO"]  # fmt: skip
    for name, c in block["per_class"].items():
        slo = " ".join(f"{k}:{v:g}" for k, v in c["slo_ms"].items()) or "-"
        good = "n/a" if c["good_fraction"] is None else f"{c['good_fraction']:.0%}"
        ttft = f"{_ms(c.get('median_ttft_ms'))}/{_ms(c.get('p99_ttft_ms'))}"
        out.append(f"{name:<12} {c['weight_share']:>6.0%} {c['output_token_share']:>5.0%} {c['completed']:>6} "
                   f"{c['failed']:>4} {_ms(c.get('output_throughput')):>8} {ttft:>17} {_ms(c.get('p99_tpot_ms')):>8} "
                   f"{_ms(c.get('p99_e2el_ms')):>9} {c['request_goodput']:>8.2f} {good:>5}  {slo}")  # fmt: skip
    j = block["fairness"]["jain_index"]
    out.append(_line("Fairness (Jain, goodput/weight):", j, ".3f"))
    out.append("(weight: share asked; got: share of output tokens; goodput: good req/s against the class's SLO)")
    return out
