"""Diagnosis: rules from the tuning checklist, each with its threshold, the evidence and what to try.

A rule looks at one run (or, for the plateau, at runs of rising concurrency) and returns findings;
silence means the run passed it. Thresholds are module constants so docs/reports.md and the tests
quote the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from orchestration.report.api_server import api_server_bound
from orchestration.report.compare import compare, regressions
from orchestration.report.findings import SEVERITY_ORDER, Finding, problems
from orchestration.report.gpu_rules import gpu_idle_ttft_grows, gpu_throttled
from orchestration.report.postprocess import RunData
from orchestration.report.prefix_reuse import reuse_ceiling
from vllm_users.measure import client_verdict as cv
from vllm_users.measure import metric_keys as K
from vllm_users.measure.client_verdict import CPU_BOUND_FRACTION, LOOP_LAG_P99_MS, RUNQ_SHARE_BUSY
from vllm_users.measure.run_result import RunResult

__all__ = ["RUN_RULES", "Finding", "concurrency_of", "diagnose", "plateau", "problems"]

TTFT_P99_OVER_MEAN = 3.0
STARTUP_FRACTION = 0.10  # start-up: requests started in the first 10 % of the run...
STARTUP_MIN_S = 1.0  # ...or at least its first second
STARTUP_MIN_STEADY = 20  # fewer steady-state successes than this: no verdict on the start-up
PREFIX_OF_CEILING_MIN = 0.50  # a hit rate under half of what the prompts allow is low...
PREFIX_CEILING_MIN = 0.10  # ...when they allow at least this much (less: nothing worth finding)
PLATEAU_CONCURRENCY_STEP = 1.5  # concurrency rose at least this factor...
PLATEAU_THROUGHPUT_GAIN = 0.10  # ...but output throughput by less than this fraction
GPU_UTIL_MIN = 70.0  # percent, DCGM_FI_DEV_GPU_UTIL
FAILURE_RATE_MAX = 0.01
SLO_ATTAINMENT_MIN = 0.99
LATE_ARRIVALS_MAX = 0.01
CHUNKS_PER_TOKEN_MIN = 0.9  # fewer output chunks than this per output token: the server packs tokens
NO_REUSE_HIT_RATE = 0.05  # shared prompts of unknown ceiling (multi-turn): below this, the cache hit nothing


def _startup_tail(run: RunData) -> Finding | None:
    """An info finding when the TTFT tail disappears without the requests of the run's start-up."""
    ttft, starts = run.arrays.get("ttft"), run.ttft_starts_s
    if (
        ttft is None
        or starts is None
        or starts.size != ttft.size
        or not ttft.size
        or run.result.get(K.WINDOWS)
    ):
        return None
    cut = max(STARTUP_MIN_S, STARTUP_FRACTION * float(starts.max()))
    steady = ttft[starts >= cut]
    if steady.size < STARTUP_MIN_STEADY or float(np.percentile(steady, 99)) > TTFT_P99_OVER_MEAN * float(
        steady.mean()
    ):
        return None
    n = int(ttft.size - steady.size)
    return Finding(
        "ttft_startup",
        run.name,
        "info",
        "TTFT tail from start-up requests only",
        f"p99 TTFT > {TTFT_P99_OVER_MEAN:g} x mean, but not without the requests started in the first "
        f"max({STARTUP_MIN_S:g} s, {STARTUP_FRACTION:.0%} of the run)",
        f"without the {n} requests started in the first {cut:.1f} s: p99 TTFT "
        f"{np.percentile(steady, 99) * 1e3:.1f} ms = {np.percentile(steady, 99) / steady.mean():.1f} x mean "
        f"{steady.mean() * 1e3:.1f} ms",
        f"The tail is the start-up burst (every user's first prefill at once), not the steady state: "
        f"add --warmup {math.ceil(cut)}s to leave it out of the statistics.",
    )


def _ttft_fluctuation(run: RunData) -> list[Finding]:
    res = run.result
    mean, p99 = res.get(K.TTFT.key("mean")), res.get(K.percentile_key(99, K.TTFT.name))
    if not mean or p99 is None or not res.get(K.COMPLETED) or p99 <= TTFT_P99_OVER_MEAN * mean:
        return []
    startup = _startup_tail(run)
    if startup is not None:
        return [startup]
    return [
        Finding(
            "ttft_fluctuation",
            run.name,
            "warning",
            "TTFT fluctuates: a long tail",
            f"p99 TTFT > {TTFT_P99_OVER_MEAN:g} x mean TTFT",
            f"p99 TTFT {p99:.1f} ms = {p99 / mean:.1f} x mean {mean:.1f} ms",
            "Requests queue behind long prefills or preemptions: look at server waiting/KV usage over time; "
            "enable chunked prefill or lower --max-num-batched-tokens to bound prefill stalls, or cap "
            "concurrency (--max-num-seqs).",
        )
    ]


def _measured_hit_rate(res: dict[str, Any]) -> tuple[float | None, str]:
    """The run's prefix-cache hit rate and its source: the server's counters, else usage's cached_tokens."""
    sm = res.get("server_metrics") or {}
    if sm.get(K.PREFIX_CACHE_HIT_RATE) is not None and sm.get("prefix_cache_queries"):
        return float(sm[K.PREFIX_CACHE_HIT_RATE]), "server (vllm:prefix_cache_hits/queries)"
    rep = (res.get("replay") or {}).get("server_prefix_hit_rate")
    if rep is not None:
        return float(rep), "server (vllm:prefix_cache_hits/queries over the replay)"
    rate = res.get(K.PREFIX_CACHE_HIT_RATE)
    if rate is not None and res.get(K.CACHED_TOKENS_REPORTED, True):
        return float(rate), "client (usage cached_tokens / prompt_tokens)"
    return None, ""


def _prefix_cache(run: RunData) -> list[Finding]:
    """A hit rate well below what the workload's prompts allow (their ceiling); none where they share nothing."""
    rate, source = _measured_hit_rate(run.result)
    allows = reuse_ceiling(run.result)
    if rate is None or not allows.expected:
        return []  # random prompts share no prefix (nothing to hit), or nothing says what they share
    if allows.ceiling is None:
        # reuse expected, its size unknown (multi-turn history): only a cache that hits (almost) nothing is a finding
        if rate >= NO_REUSE_HIT_RATE:
            return []
        rule = f"hit rate < {NO_REUSE_HIT_RATE:.0%} where the prompts share a prefix"
        evidence = f"hit rate {rate:.1%} from {source}; {allows.basis}"
    else:
        if allows.ceiling < PREFIX_CEILING_MIN or rate >= PREFIX_OF_CEILING_MIN * allows.ceiling:
            return []
        rule = (
            f"hit rate < {PREFIX_OF_CEILING_MIN:.0%} of the workload's ceiling (when that is "
            f"{PREFIX_CEILING_MIN:.0%} or more)"
        )
        evidence = f"hit rate {rate:.1%} from {source}, of a ceiling of {allows.ceiling:.1%} ({allows.basis})"
    return [
        Finding(
            "prefix_cache_low",
            run.name,
            "warning",
            "Low prefix-cache hit rate for prompts that share a prefix",
            rule,
            evidence,
            "Check that the server runs with --enable-prefix-caching, that the shared part comes first and is "
            "byte-identical, and that KV capacity is not evicting it (KV usage near 100 %).",
        )
    ]


def _failures(run: RunData) -> list[Finding]:
    ok, failed = run.result.get(K.COMPLETED) or 0, run.result.get(K.FAILED) or 0
    if not failed or failed / (ok + failed) <= FAILURE_RATE_MAX:
        return []
    kinds = ", ".join(f"{k}={v}" for k, v in sorted((run.result.get(K.ERRORS_BY_KIND) or {}).items()))
    return [
        Finding(
            "failures",
            run.name,
            "critical",
            "Requests failed",
            f"failure rate > {FAILURE_RATE_MAX:.0%}",
            f"{failed} of {ok + failed} failed ({failed / (ok + failed):.1%}); {kinds or 'kinds unknown'}",
            "Read errors_by_kind: http 429/503 = overload (lower the rate); timeout/truncated = server stalls "
            "or --stream-timeout too low; connection = server restarts. Latency of the survivors is "
            "biased low.",
        )
    ]


# per client verdict (client_verdict.classify): rule, severity, title; client_verdict.ADVICE says what to try
_CLIENT_FINDINGS = {
    "cpu_saturated": ("client_bound", "critical", "The load generator was the bottleneck: its CPU"),
    "loop_blocked": (
        "client_bound",
        "critical",
        "The load generator was the bottleneck: its code held the loop",
    ),
    "machine_busy": ("machine_busy", "warning", "Other load on the client's host delayed the numbers"),
    "loop_lag": ("loop_lag", "warning", "The client's event loop lagged (this kernel does not tell why)"),
}


def _client_bound(run: RunData) -> list[Finding]:
    """The client's health, one finding per cause: our CPU or our code (client_bound), the machine
    (machine_busy: not our client), a lag whose cause the kernel did not tell (loop_lag)."""
    health = RunResult.from_json(run.result).client_health or {}
    th = health.get("thresholds") or {}
    cpu, lag = th.get("cpu_mean", CPU_BOUND_FRACTION), th.get("loop_lag_p99_ms", LOOP_LAG_P99_MS)
    share = th.get("lag_runq_share", RUNQ_SHARE_BUSY)
    threshold = {
        "cpu_saturated": f"worker CPU mean > {cpu:.0%} of a core, or its loop thread never idle",
        "loop_blocked": f"loop lag p99 > {lag:g} ms, less than {share:.0%} of it waiting for a CPU",
        "machine_busy": f"loop lag p99 > {lag:g} ms, at least {share:.0%} of it waiting for a CPU",
        "loop_lag": f"loop lag p99 > {lag:g} ms",
    }
    by: dict[str, list[str]] = {}
    for n, w in (health.get("workers") or {}).items():
        v = w.get("verdict") or cv.classify(w)  # a result from before verdicts were kept: from its evidence
        by.setdefault(v, []).append(f"{n}: {cv.evidence(w, v)}")
    out = []
    for v, (rule, severity, title) in _CLIENT_FINDINGS.items():
        if v in by:
            out.append(
                Finding(rule, run.name, severity, title, threshold[v], "; ".join(by[v]), cv.ADVICE[v] + ".")
            )
    return out


def _gpu_util(run: RunData) -> list[Finding]:
    sm = run.result.get("server_metrics") or {}
    util = sm.get("gpu_util_mean")
    if util is None or util >= GPU_UTIL_MIN:
        return []
    return [
        Finding(
            "gpu_underutilized",
            run.name,
            "warning",
            "GPU under-utilised",
            f"mean DCGM_FI_DEV_GPU_UTIL < {GPU_UTIL_MIN:g} %",
            f"mean GPU utilisation {util:.0f} %",
            "The GPU waits on something else: more concurrency or a higher rate, a larger "
            "--max-num-seqs / --max-num-batched-tokens, or look for CPU-side bottlenecks "
            "(tokenisation, detokenisation, the client).",
        )
    ]


def _slo(run: RunData) -> list[Finding]:
    gp = run.result.get(K.GOODPUT) or {}
    frac = gp.get("good_fraction")
    if frac is None or frac >= SLO_ATTAINMENT_MIN:
        return []
    per = gp.get("per_metric_met_fraction") or {}
    worst = min(per, key=lambda k: per[k]) if per else None
    ev = f"{frac:.1%} of requests met every SLO {gp.get('slo_ms')}" + (
        f"; weakest: {worst} met by {per[worst]:.1%}" if worst else ""
    )
    return [
        Finding(
            "slo_miss",
            run.name,
            "critical" if frac < 0.9 else "warning",
            "SLO misses",
            f"SLO attainment < {SLO_ATTAINMENT_MIN:.0%}",
            ev,
            "Lower the offered load until attainment recovers (that rate is your capacity at this SLO), or "
            "tune for the weakest metric: TTFT -> prefill/queueing, TPOT -> batch size/decode.",
        )
    ]


def _schedule(run: RunData) -> list[Finding]:
    arr = run.result.get(K.ARRIVALS) or {}
    sched = arr.get("scheduled") or 0
    dropped, late = arr.get("dropped") or 0, arr.get("late") or 0
    if not sched or (not dropped and late / sched <= LATE_ARRIVALS_MAX):
        return []
    return [
        Finding(
            "schedule_slip",
            run.name,
            "warning",
            "Offered load not delivered on time",
            f"any dropped arrival or late arrivals > {LATE_ARRIVALS_MAX:.0%}",
            f"{dropped} dropped, {late} late of {sched} scheduled",
            "Raise --max-concurrency (slots were full) or add workers; the rate you asked for is not the rate "
            "the server saw.",
        )
    ]


def _coalesced_chunks(run: RunData) -> list[Finding]:
    # an answer read as one body (--no-stream, pooling) has no chunks: its one "chunk" per answer says nothing
    # about the server's packing, and a mix of the two gives a ratio of neither
    if run.result.get(K.NOT_STREAMED_REQUESTS) or run.result.get(K.POOLING_REQUESTS):
        return []
    ratio = run.result.get(K.CHUNK_TOKEN_RATIO)
    if ratio is None or ratio >= CHUNKS_PER_TOKEN_MIN:
        return []
    return [
        Finding(
            "coalesced_chunks",
            run.name,
            "warning",
            "The server sends several tokens per chunk",
            f"output chunks per output token < {CHUNKS_PER_TOKEN_MIN:g}",
            f"{ratio:.3f} chunks per output token ({1 / ratio:.2f} tokens per chunk)",
            "The server's front end (the API server process) falls behind its engine and packs tokens "
            "into one chunk. ITL is per chunk (vLLM bench's definition), so it mixes near-zero and long "
            "gaps; TPOT (per token) is not affected. Give the API server CPU (more cores, "
            "--api-server-count), or lower the load.",
        )
    ]


def _input_len(run: RunData) -> list[Finding]:
    chk = RunResult.from_json(run.result).input_len_check or {}
    if not chk or chk.get("ok", True):
        return []
    return [
        Finding(
            "input_len_off",
            run.name,
            "critical",
            "Prompts were not the length asked for",
            f"mean prompt text tokens more than {chk.get('tolerance', 0.1):.0%} off --input-len",
            f"{chk.get('actual_text_mean', 0):.1f} tokens where {chk.get('requested_mean', 0):.1f} were asked "
            f"({chk.get('off_fraction', 0):+.0%}; calibration: {chk.get('calibration') or 'unknown'})",
            "Latency and throughput are for these lengths. Give --tokenizer (the model's tokenizer files) "
            "or use a server with /tokenize or usage.prompt_tokens; docs/scenarios.md says how lengths "
            "are calibrated.",
        )
    ]


def _class_slo(run: RunData) -> list[Finding]:
    """Traffic classes: each class below SLO attainment, and the class that took more of the capacity
    (share of output tokens) than its weight asked, most over first."""
    per = (RunResult.from_json(run.result).classes or {}).get("per_class") or {}
    missed = [
        (n, c)
        for n, c in per.items()
        if c.get("slo_ms")
        and c.get("requests")
        and (c.get("good_fraction") is None or c["good_fraction"] < SLO_ATTAINMENT_MIN)
    ]
    out = []
    for name, c in missed:
        over = {n: o["output_token_share"] - o["weight_share"] for n, o in per.items() if n != name}
        taker = max(over, key=lambda n: over[n]) if over else None
        took = (
            (
                f"; class {taker} took {per[taker]['output_token_share']:.0%} of the output tokens for a weight of "
                f"{per[taker]['weight_share']:.0%}"
            )
            if taker is not None and over[taker] > 0
            else ""
        )
        frac = "none completed" if c.get("good_fraction") is None else f"{c['good_fraction']:.1%} good"
        out.append(
            Finding(
                "class_slo_miss",
                run.name,
                "critical" if (c.get("good_fraction") or 0) < 0.9 else "warning",
                f"Class {name} misses its SLO",
                f"class attainment < {SLO_ATTAINMENT_MIN:.0%}",
                f"class {name}: {frac} against {c['slo_ms']} (got {c['output_token_share']:.0%} of the "
                f"output tokens for a weight of {c['weight_share']:.0%}){took}",
                "Give the class a lower `priority` value (with vLLM's --scheduling-policy priority), lower "
                "the other classes' load or weight, or add capacity; docs/classes.md.",
            )
        )
    return out


RUN_RULES: tuple[Callable[[RunData], list[Finding]], ...] = (
    _failures,
    _client_bound,
    _slo,
    _class_slo,
    _ttft_fluctuation,
    _prefix_cache,
    _gpu_util,
    _schedule,
    _coalesced_chunks,
    _input_len,
    api_server_bound,
    gpu_throttled,
    gpu_idle_ttft_grows,
)


def concurrency_of(run: RunData) -> float | None:
    """The concurrency a run was driven at: --max-concurrency, users, else the measured peak."""
    typed = RunResult.from_json(run.result)
    for v in (typed.max_concurrency, typed.meta.get("users"), typed.metric(K.MAX_CONCURRENT_REQUESTS)):
        if isinstance(v, int | float) and v > 0:
            return float(v)
    return None


def plateau(runs: Sequence[RunData]) -> list[Finding]:
    """Throughput that stops growing while concurrency keeps rising (needs two or more runs)."""
    pts = [(c, r) for r in runs if (c := concurrency_of(r)) and r.result.get(K.OUTPUT_THROUGHPUT)]
    pts.sort(key=lambda p: p[0])
    out = []
    for (c0, r0), (c1, r1) in zip(pts, pts[1:], strict=False):
        t0, t1 = r0.result[K.OUTPUT_THROUGHPUT], r1.result[K.OUTPUT_THROUGHPUT]
        if c1 >= PLATEAU_CONCURRENCY_STEP * c0 and t1 < t0 * (1 + PLATEAU_THROUGHPUT_GAIN):
            out.append(
                Finding(
                    "throughput_plateau",
                    r1.name,
                    "warning",
                    "Throughput plateau",
                    f"concurrency x{PLATEAU_CONCURRENCY_STEP:g} or more, output throughput "
                    f"+{PLATEAU_THROUGHPUT_GAIN:.0%} or less",
                    f"concurrency {c0:g} -> {c1:g} (x{c1 / c0:.1f}); output throughput {t0:.0f} -> "
                    f"{t1:.0f} tok/s ({(t1 / t0 - 1) * 100:+.1f} %)",
                    "The server is saturated (likely memory bound: KV cache full, requests wait). Try "
                    "KV-cache quantization (--kv-cache-dtype fp8), a larger --max-num-batched-tokens, "
                    "more GPU memory (--gpu-memory-utilization) or tensor parallelism; past this point "
                    "more load only adds latency.",
                )
            )
    return out


def diagnose(runs: Sequence[RunData], comparison: dict[str, Any] | None = None) -> list[Finding]:
    """All findings for these runs, most severe first; several runs are compared against the first
    (`comparison`, else computed) and a significant regression is a finding."""
    found: list[Finding] = []
    for run in runs:
        for rule in RUN_RULES:
            found.extend(rule(run))
    if len(runs) > 1:
        found.extend(plateau(runs))
        found.extend(regressions(comparison if comparison is not None else compare(runs)))
    return sorted(found, key=lambda f: SEVERITY_ORDER.get(f.severity, 3))
