"""The result fields (vLLM bench serve's names, our extras beside them) from the definitions in vllm_users.measure.metrics.

Like there, functions take the run's `Columns` or a list of `RequestRecord`s, and `idx`, the rows to use.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, TypedDict, cast

import numpy as np

from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import Columns, Records, as_columns
from vllm_users.measure.delivered import delivery
from vllm_users.measure.kinds import POOLING_ENDPOINTS, ErrorKind
from vllm_users.measure.metrics import (
    DEFAULT_METRIC_PERCENTILES,
    DEFAULT_PERCENTILE_METRICS,
    DEFAULT_PERCENTILES,
    LATE_THRESHOLD_S,
    Slo,
    duration_s,
    latency_stats,
    ok_rows,
    or_zero,
    peak_concurrency,
    peak_output_tokens_per_s,
    reasoning_samples,
    request_spans,
    rows,
    sent_rows,
    slo_met,
    stats_ms,
    streamed_rows,
    tpots,
)
from vllm_users.measure.unreachable import unreachable_spans
from vllm_users.measure.windows import Window, split


class LatencyCache:
    """Latency statistics of one success set, shared by the overall and per-scenario computations."""

    def __init__(self) -> None:
        self.d: dict[tuple[bytes, tuple[float, ...]], dict[str, float]] = {}

    def stats(self, c: Columns, ok: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
        """latency_stats and max_output_tokens_per_s of the successes `ok`, computed once."""
        key = (hashlib.blake2b(ok.tobytes(), digest_size=16).digest(), tuple(percentiles))
        if key not in self.d:
            res = latency_stats(c, ok, percentiles)
            res[K.MAX_OUTPUT_TOKENS_PER_S] = peak_output_tokens_per_s(c, ok)
            self.d[key] = res
        return self.d[key]


def compute_metrics(
    records: Records,
    idx: np.ndarray | None = None,
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
    percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
    duration: float | None = None,
    cache: LatencyCache | None = None,
) -> dict[str, Any]:
    """vLLM-named result fields of records `idx` (default all), plus our extras beside them.

    mean/median/std of every metric; `p{N}_{metric}_ms` for `percentiles` of `percentile_metrics` only
    (vLLM bench serve's --metric-percentiles and --percentile-metrics)."""
    c = as_columns(records)
    idx = rows(c, idx)
    cache = cache or LatencyCache()
    sent = sent_rows(c, idx)
    ok = ok_rows(c, sent)
    interrupted = int((c.a["error"][sent] == c.code("error", "interrupted")).sum())
    failed = sent.size - ok.size - interrupted
    dur = duration if duration is not None else duration_s(c, idx)
    dur = dur or 1e-9
    total_in = int(or_zero(c.a["prompt_tokens"][ok]).sum())
    total_out = int(or_zero(c.a["output_tokens"][ok]).sum())
    lat = cache.stats(c, ok, percentiles)
    res: dict[str, Any] = {
        K.DURATION: dur,
        K.COMPLETED: int(ok.size),
        K.FAILED: int(failed),
        K.TOTAL_INPUT_TOKENS: total_in,
        K.TOTAL_OUTPUT_TOKENS: total_out,
        K.REQUEST_THROUGHPUT: ok.size / dur,
        K.REQUEST_GOODPUT: None,
        K.OUTPUT_THROUGHPUT: total_out / dur,
        K.TOTAL_TOKEN_THROUGHPUT: (total_in + total_out) / dur,
        K.MAX_OUTPUT_TOKENS_PER_S: lat[K.MAX_OUTPUT_TOKENS_PER_S],
        K.MAX_CONCURRENT_REQUESTS: peak_concurrency(c, sent),
    }
    if _pooling(c, sent):  # embeddings/rerank/score generate nothing: their throughput is input tokens/s
        res[K.INPUT_THROUGHPUT] = total_in / dur
        if ok.size and not (c.a["output_tokens"][ok] != -1).any():  # only pooling answers: no output figures
            for k in res:  # the output figures: None, never 0
                if "pooling" not in K.DECLARED[k].applies_to:
                    res[k] = None
    streamed = streamed_rows(c, ok)
    tpot_s = tpots(c, streamed)[0]
    tpot_s = tpot_s[tpot_s > 0]  # chunks that all came at once: no speed to speak of
    if tpot_s.size:  # like TPOT: absent where no streamed success has one
        res[K.OUTPUT_THROUGHPUT_PER_USER] = float(np.mean(1.0 / tpot_s))
    # nothing streamed but non-streamed answers: TTFT/ITL/TPOT do not apply and are left out, never 0
    no_stream = not streamed.size and bool(c.a["not_streamed"][sent].any())
    if (
        no_stream and K.E2EL.name not in percentile_metrics
    ):  # E2EL is all there is: its percentiles, as vllm bench
        percentile_metrics = (
            *percentile_metrics,
            K.E2EL.name,
        )  # serve's pooling default (--percentile-metrics e2el)
    # every streamed success delivered at once: no TPOT or ITL was measured (absent, with the reason, never 0)
    all_at_once = bool(streamed.size) and bool((c.a["chunks_at_once"][streamed] > 0).all())
    for m in K.LATENCIES:
        if no_stream and "not_streamed" not in m.applies_to:
            continue  # TTFT/TPOT/ITL of answers read as one body: absent
        if all_at_once and m in (K.TPOT, K.ITL):
            continue
        chosen = percentiles if m.name in percentile_metrics else ()
        for key in (*(m.key(s) for s in K.LATENCY_STATS), *(K.percentile_key(p, m.name) for p in chosen)):
            res[key] = lat[key]
    res.update(_reasoning_fields(c, ok, percentiles, percentile_metrics))
    res.update(_image_fields(c, ok))
    if slo is not None:
        met, in_time, valid, good_rows = good_mask(c, ok, slo)
        good = int(good_rows.sum())
        res[K.REQUEST_GOODPUT] = good / dur
        res[K.GOODPUT] = {
            "slo_ms": dict(slo.limits_ms),
            "good": good,
            "good_fraction": good / ok.size if ok.size else 0.0,
            "per_metric_met_fraction": {
                k: (int(m_.sum()) / ok.size if ok.size else 0.0) for k, m_ in met.items()
            },
        }
        if slo.require_valid:  # `valid` named: good = in time and valid; the latency-only figures beside it
            res[K.GOODPUT].update(
                requires_valid=True,
                good_latency_only=int(in_time.sum()),
                request_goodput_latency_only=int(in_time.sum()) / dur,
                invalid=int((~valid).sum()),
            )
    res.update(_extras(c, sent, ok, idx))
    res[K.INTERRUPTED] = interrupted
    return res


def good_mask(
    c: Columns, ok: np.ndarray, slo: Slo
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Per success of `ok`: each objective met, all met (in time), valid, and good (in time, and valid when the
    SLO requires it)."""
    met = slo_met(c, ok, slo)
    in_time = np.logical_and.reduce([*met.values(), np.ones(ok.size, dtype=bool)])
    valid = c.a["valid"][ok] != 0  # rec.valid False: a wrong answer (json, tools, a check hook)
    return met, in_time, valid, (in_time & valid) if slo.require_valid else in_time


def _reasoning_fields(
    c: Columns, ok: np.ndarray, percentiles: Sequence[float], percentile_metrics: Sequence[str]
) -> dict[str, Any]:
    """Reasoning tokens, TTFA and the reasoning/answer TPOTs; nothing for a run without reasoning.

    TTFA's percentiles follow TTFT's choice in --percentile-metrics, the two TPOTs follow TPOT's."""
    r = c.a["reasoning_tokens"][ok]
    has = r != -1
    if not has.any():
        return {}
    total_r = int(r[has].sum())
    out: dict[str, Any] = {
        K.REASONING_REQUESTS: int(has.sum()),
        K.REASONING_TOKENS_ESTIMATED_REQUESTS: int(c.a["reasoning_estimated"][ok].sum()),
        K.TOTAL_REASONING_TOKENS: total_r,
        K.TOTAL_ANSWER_TOKENS: int(or_zero(c.a["output_tokens"][ok]).sum()) - total_r,
    }
    follows = {m.name: m.follows for m in K.REASONING_LATENCIES}
    for m, values in reasoning_samples(c, ok).items():
        if not values.size:  # e.g. no request reached its answer: no TTFA at all
            continue
        chosen = percentiles if follows[m] in percentile_metrics else ()
        for k, v in stats_ms(values, chosen).items():
            if k != "max":
                out[K.stat_key(k, m)] = v
    return out


def _image_fields(c: Columns, ok: np.ndarray) -> dict[str, Any]:
    """Images sent per request and their prompt tokens where known; nothing for a run without.

    Image tokens are estimated: usage.prompt_tokens less the text's exact token count (record.add_images),
    over the requests where that count was exact; absent when it never was."""
    n = c.a["images"][ok]
    has = n != -1
    if not has.any():
        return {}
    out: dict[str, Any] = {
        K.IMAGE_REQUESTS: int(has.sum()),
        K.TOTAL_IMAGES: int(n[has].sum()),
        K.MEAN_IMAGES_PER_REQUEST: float(n[has].mean()),
    }
    t = c.a["image_tokens"][ok]
    known = t != -1
    if known.any():
        out[K.MEAN_IMAGE_TOKENS_PER_REQUEST] = float(t[known].mean())
        out[K.IMAGE_TOKENS_ESTIMATED_REQUESTS] = int(known.sum())
    return out


def _counter(c: Columns, column: str, idx: np.ndarray) -> list[tuple[int, int]]:
    """(code, count) of a column over idx, in order of first occurrence (like collections.Counter)."""
    if not idx.size:
        return []
    uniq, first, counts = np.unique(c.a[column][idx], return_index=True, return_counts=True)
    return [(int(uniq[i]), int(counts[i])) for i in np.argsort(first)]


def _compressed(c: Columns, idx: np.ndarray) -> dict[str, int]:
    """Content-Encoding -> requests whose body the server compressed (the client decoded it)."""
    t = c.tables.get("content_encoding") or [None]
    return {str(t[k]): n for k, n in _counter(c, "content_encoding", idx) if t[k] is not None}


TOP_ERRORS = 10


class ErrorMessage(TypedDict):
    """One entry of a result's error_messages: a failure kind, the server's words, how many requests said them."""

    kind: ErrorKind
    message: str | None
    count: int


def error_messages(c: Columns, failed: np.ndarray) -> list[ErrorMessage]:
    """The most frequent (kind, message) pairs of the failures `failed`, most frequent first (at most TOP_ERRORS):
    the server's own words where it gave any (client.sse_forms keeps them short and without credentials)."""
    if not failed.size:
        return []
    pairs = np.stack([c.a["error"][failed], c.a["error_detail"][failed]], axis=1)
    uniq, first, counts = np.unique(pairs, axis=0, return_index=True, return_counts=True)
    order = sorted(range(len(uniq)), key=lambda i: (-int(counts[i]), int(first[i])))[:TOP_ERRORS]
    kinds, details = c.tables["error"], c.tables["error_detail"]
    return [
        {
            "kind": cast("ErrorKind", kinds[int(uniq[i][0])]),
            "message": details[int(uniq[i][1])],
            "count": int(counts[i]),
        }
        for i in order
    ]


def _unreachable(c: Columns, sent: np.ndarray) -> list[dict[str, Any]]:
    """unreachable_spans of `sent`, timed from the first request's start."""
    return unreachable_spans(c, sent, float(c.a["t_start"][sent].min())) if sent.size else []


def _pooling(c: Columns, idx: np.ndarray) -> int:
    """How many of `idx` went to a pooling endpoint (record.POOLING_ENDPOINTS; each has one "chunk")."""
    codes = [c.code("endpoint", e) for e in POOLING_ENDPOINTS]
    return int(np.isin(c.a["endpoint"][idx], codes).sum()) if idx.size else 0


def _extras(c: Columns, sent: np.ndarray, ok: np.ndarray, idx: np.ndarray) -> dict[str, Any]:
    err = c.a["error"]
    e_sent = err[sent]
    failed_rows = sent[(e_sent != c.code("error", None)) & (e_sent != c.code("error", "interrupted"))]
    errors: dict[ErrorKind, int] = {
        cast("ErrorKind", c.tables["error"][k]): n for k, n in _counter(c, "error", failed_rows)
    }
    http_rows = sent[e_sent == c.code("error", "http")]
    statuses = {str(k): n for k, n in _counter(c, "status", http_rows)}
    chunks = int(c.lens[ok].sum()) - _pooling(c, ok)  # a pooling answer's one "chunk" is its end, not output
    at_once = c.a["chunks_at_once"][ok]
    chunks += int(
        (at_once[at_once > 0] - 1).sum()
    )  # a success delivered at once keeps one chunk time of its n
    out_tokens = int(or_zero(c.a["output_tokens"][ok]).sum())
    cached_col = c.a["cached_tokens"][ok]
    has_cached = cached_col != -1
    prompt = int(or_zero(c.a["prompt_tokens"][ok][has_cached]).sum())
    cached = int(or_zero(cached_col[has_cached]).sum())
    scheduled = int((~np.isnan(c.a["t_intended"][idx])).sum())
    dropped = int((err[idx] == c.code("error", "dropped")).sum())
    extras: dict[str, Any] = {
        K.ERRORS_BY_KIND: errors,
        K.HTTP_ERRORS_BY_STATUS: statuses,
        K.CHUNK_TOKEN_RATIO: (chunks / out_tokens) if out_tokens else None,
        K.TOKENS_ESTIMATED_REQUESTS: int(c.a["tokens_estimated"][ok].sum()),
        **({K.MISSING_DONE_REQUESTS: n} if (n := int(c.a["no_done"][ok].sum())) else {}),  # only when any
        **({K.COMPRESSED_STREAMS: enc} if (enc := _compressed(c, sent)) else {}),  # only when any
        **({K.USAGE_BELOW_CHUNKS: u} if (u := usage_below_chunks(c, ok)) else {}),
        **({K.DELIVERED_AT_ONCE: d} if (d := delivered_at_once(c, ok)) else {}),
        **({K.ERROR_MESSAGES: msgs} if (msgs := error_messages(c, failed_rows)) else {}),
        # only when any: stretches in which every request found the server gone (refused or reset)
        **({K.SERVER_UNREACHABLE: spans} if (spans := _unreachable(c, sent)) else {}),
        **({K.NOT_STREAMED_REQUESTS: n} if (n := int(c.a["not_streamed"][sent].sum())) else {}),
        **({K.POOLING_REQUESTS: n} if (n := _pooling(c, sent)) else {}),  # embeddings/rerank/score: no output
        K.PREFIX_CACHE_HIT_RATE: (cached / prompt) if prompt else None,
        K.CACHED_TOKENS_REPORTED: bool(has_cached.any()),
    }
    valid = c.a["valid"][sent]
    validated = valid != -1
    extras[K.VALIDITY_RATE] = (
        (int((valid[validated] == 1).sum()) / int(validated.sum())) if validated.any() else None
    )
    # prompt_tokens of a request with images hold their tokens too: left out of the text-length check
    req = ok[(c.a["input_len"][ok] != -1) & (c.a["prompt_tokens"][ok] != -1) & (c.a["images"][ok] == -1)]
    if req.size:
        extras[K.INPUT_LEN_REQUESTED_MEAN] = float(np.mean(c.a["input_len"][req]))
        extras[K.INPUT_LEN_ACTUAL_MEAN] = float(np.mean(c.a["prompt_tokens"][req]))
    if scheduled:
        extras[K.ARRIVALS] = arrival_stats(c, idx)
    else:
        extras[K.ARRIVALS] = {"scheduled": 0, "sent": int(sent.size), "dropped": dropped}
    return extras


USAGE_BELOW_WHY = (
    "usage said fewer output tokens than the output chunks streamed; each chunk carries a token's text at "
    "least, so these requests' output tokens are their chunks, counted"
)
AT_ONCE_WHY = (
    "delivered at once: a buffering proxy? every output chunk of these came within 100 µs, so their chunk gaps "
    "time the proxy, not the server: TTFT = E2EL, and they give no TPOT or ITL"
)


def usage_below_chunks(c: Columns, ok: np.ndarray) -> dict[str, Any] | None:
    """The successes whose usage said fewer output tokens than their chunks: how many, both totals and the
    count used (the chunks) with why; None when there are none."""
    told = c.a["usage_tokens"][ok]
    rows_ = ok[told != -1]
    if not rows_.size:
        return None
    return {
        "requests": int(rows_.size),
        "usage_output_tokens": int(told[told != -1].sum()),
        "chunk_output_tokens": int(c.a["output_tokens"][rows_].sum()),
        "count_used": "chunks",
        "why": USAGE_BELOW_WHY,
    }


def delivered_at_once(c: Columns, ok: np.ndarray) -> dict[str, Any] | None:
    """The streamed successes whose chunks all came at once: how many, of how many streamed, and why they have
    no TPOT or ITL; None when there are none."""
    n = int((c.a["chunks_at_once"][ok] > 0).sum())
    if not n:
        return None
    return {"requests": n, "streamed_requests": int(streamed_rows(c, ok).size), "why": AT_ONCE_WHY}


def arrival_stats(
    records: Records, idx: np.ndarray | None = None, *, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> dict[str, Any]:
    """Open-loop schedule keeping: scheduled/sent/dropped/late, lag, latency from intended start (each
    distribution with its max; fixed percentiles, not the run's --metric-percentiles)."""
    c = as_columns(records)
    idx = rows(c, idx)
    ts, ti = c.a["t_start"], c.a["t_intended"]
    sched = idx[~np.isnan(ti[idx])]
    sent = sent_rows(c, sched)
    lag = ts[sent] - ti[sent]
    ok = ok_rows(c, sent)
    base = ts[ok] - ti[ok]
    return {
        "scheduled": int(sched.size),
        "sent": int(sent.size),
        "dropped": int(sched.size - sent.size),
        "late": int((lag > LATE_THRESHOLD_S).sum()),
        "late_threshold_ms": LATE_THRESHOLD_S * 1000,
        "schedule_lag_ms": stats_ms(lag, percentiles),
        "ttft_from_intended_ms": stats_ms(base + c.first_chunk(ok) / 1e6, percentiles),
        "e2el_from_intended_ms": stats_ms(base + c.last_chunk(ok) / 1e6, percentiles),
    }


def per_scenario(
    records: Records,
    idx: np.ndarray | None = None,
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
    percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
    cache: LatencyCache | None = None,
) -> dict[str, dict[str, Any]]:
    """compute_metrics for each scenario on the run's common duration."""
    c = as_columns(records)
    idx = rows(c, idx)
    dur = duration_s(c, idx)
    codes = c.a["scenario"][idx]
    present = np.unique(codes)
    names = sorted((c.tables["scenario"][int(k)], int(k)) for k in present)
    cache = cache or LatencyCache()
    return {
        str(name): compute_metrics(
            c,
            idx if present.size == 1 else idx[codes == k],
            slo=slo,
            percentiles=percentiles,
            percentile_metrics=percentile_metrics,
            duration=dur,
            cache=cache,
        )
        for name, k in names
    }


def ttft_by_turn(
    records: Records, idx: np.ndarray | None = None, percentiles: Sequence[float] = (50, 99)
) -> dict[str, Any]:
    """Sessions of several requests (multi-turn, tool follow-ups, agents): TTFT stats and cached-token fraction
    by turn index (of rows `idx`, default all). Requests that are their session's only one (chat: turn 0 of a
    one-request session) are left out; records without a session (older runs) count by their turn alone."""
    c = as_columns(records)
    ok = ok_rows(c, rows(c, idx))
    turn, session = c.a["turn"][ok], c.a["session"][ok]
    multi = np.unique(c.a["session"][c.a["turn"] > 0])
    keep = (turn != -1) & ((session == -1) | np.isin(session, multi))
    ok, turn = ok[keep], turn[keep]
    out: dict[str, Any] = {}
    for t in np.unique(turn).tolist():
        rs = ok[turn == t]
        prompt = int(or_zero(c.a["prompt_tokens"][rs]).sum())
        cached = int(or_zero(c.a["cached_tokens"][rs]).sum())
        out[str(t)] = {
            "count": int(rs.size),
            "ttft_ms": stats_ms(c.first_chunk(rs) / 1e6, percentiles),
            "mean_prompt_tokens": prompt / rs.size,
            "cached_fraction": cached / prompt if prompt else None,
        }
    return out


def timeseries(records: Records, bucket_s: float = 1.0) -> dict[str, Any]:
    """Per time bucket since the first dispatch: completions/s, failures/s, output tok/s (by completion),
    in-flight requests (at the bucket's middle) and TTFT p50/p99 (by first-token time)."""
    c = as_columns(records)
    sent = sent_rows(c, rows(c))
    if not sent.size:
        return {"t0": None, "bucket_s": bucket_s, "t": []}
    starts, ends = request_spans(c, sent)
    has = c.lens[sent] > 0
    ok = (c.a["error"][sent] == c.code("error", None)) & has
    out_tok = or_zero(c.a["output_tokens"][sent]).astype(np.float64)
    ttft = np.zeros(sent.size)
    ttft[has] = c.first_chunk(sent[has])
    ttft /= 1e6
    t0 = float(starts.min())
    nb = int((ends.max() - t0) // bucket_s) + 1
    end_b = ((ends - t0) // bucket_s).astype(np.int64)
    completed = np.bincount(end_b[ok], minlength=nb) / bucket_s
    failed = np.bincount(end_b[~ok], minlength=nb) / bucket_s
    tokens = np.bincount(end_b[ok], weights=out_tok[ok], minlength=nb) / bucket_s
    mids = t0 + (np.arange(nb) + 0.5) * bucket_s
    inflight = np.searchsorted(np.sort(starts), mids, "right") - np.searchsorted(np.sort(ends), mids, "right")
    first_b = ((starts[ok] + ttft[ok] - t0) // bucket_s).astype(np.int64)
    order = np.argsort(first_b, kind="stable")
    groups = np.split(ttft[ok][order] * 1000.0, np.flatnonzero(np.diff(first_b[order])) + 1)
    p50 = np.full(nb, np.nan)
    p99 = np.full(nb, np.nan)
    keys = np.unique(first_b)  # sorted, one per non-empty group, in the groups' order
    for k, g in zip(keys, groups, strict=False):
        if g.size and 0 <= k < nb:
            p50[k], p99[k] = np.percentile(g, [50, 99])
    return {
        "t0": t0,
        "bucket_s": bucket_s,
        "t": (np.arange(nb) * bucket_s).tolist(),
        "completed_per_s": completed.tolist(),
        "failed_per_s": failed.tolist(),
        "output_tokens_per_s": tokens.tolist(),
        "inflight": inflight.astype(np.int64).tolist(),
        "ttft_p50_ms": p50.tolist(),
        "ttft_p99_ms": p99.tolist(),
    }


def build_metrics(
    records: Records,
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
    percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
    warmup: Window | None = None,
    cooldown: Window | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any], int]:
    """What results.build_result needs: compute_metrics, per_scenario (sent requests), ttft_by_turn, sent count.

    With a warm-up or cool-down window, every statistic comes from the measured window alone and the result
    gets a `windows` block (vllm_users.measure.windows)."""
    c = as_columns(records)
    cache = LatencyCache()
    everything = rows(c)
    measured, windows = split(c, everything, warmup, cooldown)
    kw: dict[str, Any] = {"slo": slo, "percentiles": percentiles, "percentile_metrics": percentile_metrics}
    res = compute_metrics(c, measured, cache=cache, **kw)
    if windows is not None:
        res[K.WINDOWS] = windows
    sent = sent_rows(c, measured)
    ok = ok_rows(c, sent)
    d = delivery(c, ok, good_mask(c, ok, slo)[3] if slo is not None else None)
    if d is not None:  # the load that was applied (absent: too few completions to have an interior)
        res[K.DELIVERY] = d
    scen = per_scenario(c, sent, cache=cache, **kw)
    return res, scen, ttft_by_turn(c, measured), int(sent_rows(c, everything).size)
