"""The decode constants of the twin's fit (fit.py): decode_step_ms, decode_per_seq_ms and decode_per_ctx_token_us
from the probe's TPOT points, with an uncertainty for each.

The context term comes from the context phase's own points (one stream at three context lengths, in turn); where
those cannot resolve it (its uncertainty as large as its value: on the H100, 0.038 ± 0.36 µs per token from
contexts of 60-1,400 tokens), from the batch bursts' decode TPOT instead, each B streams over ~200k context tokens,
a point as far out on the context axis as a search's steps go.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from orchestration.twin.apistage import held_back
from orchestration.twin.lsq import RESOLUTION_MS, SIGMAS, Line, linfit, planefit
from orchestration.twin.ownpath import tpot_excess
from orchestration.twin.phases import CONTEXT
from vllm_sim.config import SimConfig

__all__ = ["const", "decode_constants"]

_DEFAULTS = SimConfig()


def const(value: Any, unc: float | None, unit: str, source: str, note: str | None = None) -> dict[str, Any]:
    """One constant of the profile: its value, uncertainty, unit, source and note."""
    out: dict[str, Any] = {"value": value, "uncertainty": unc, "unit": unit, "source": source}
    if note:
        out["note"] = note
    return out


_NO_CTX = "not measured (no TPOT points at two context lengths): decode time does not grow with the context"


def decode_constants(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """decode_step_ms, decode_per_seq_ms and decode_per_ctx_token_us: a plane in (batch, context) where the
    points have two context lengths per sequence, else a line in the batch (and no context term)."""
    pts = raw.get("tpot") or []
    path = raw.get("path_latency")
    # the twin's own TPOT excess at each batch comes back when it serves: fit what is left; where the API server
    # held the chunks back (the clients well above the engine's own TPOT histogram), the engine's step is the
    # engine's reading, and the rest is the API-server stage's (apistage.py): with one API server on an H100,
    # fitting the clients' TPOT made the cost per sequence 0.037 ms against four servers' 0.014
    xs = [float(p["batch"]) for p in pts]
    ys = [
        float(p["tpot_ms"])
        - tpot_excess(path, float(p["batch"]))
        - (float(p["api_tpot_ms"]) if held_back(p) else 0.0)
        for p in pts
    ]
    ctx = [float(p.get("context_tokens") or 0.0) for p in pts]
    own = _context_term(pts, xs, ys, ctx)
    if own is not None:
        k, k_line = own
        uk, source = k_line.ub, "fit"
        note = None if k_line.b >= 0 else f"the fit said {1000 * k_line.b:.3g} µs (below 0): 0"
        step, per = _decode_line(xs, [y - k * cx for y, cx in zip(ys, ctx, strict=True)], path)
        # not resolved by the context phase: the bursts' term, which rests on the step and the cost per sequence,
        # as they rest on it: refitted in turn until it stands still (on the H100: 0.0093, 0.0082, 0.0081 µs, ...)
        for _ in range(10 if uk >= k else 0):
            got = _burst_context(raw, step, per)
            if got is None or not got[1] < k_line.ub:
                break
            moved = abs(got[0] - k) > 1e-3 * max(got[0], 1e-12)
            k, uk = got
            source = "burst"
            note = (
                f"{len(_decode_bursts(raw))} bursts' decode TPOT over their context; the context phase said "
                f"{1000 * k_line.b:.3g} ± {1000 * k_line.ub:.3g} µs (not resolved)"
            )
            step, per = _decode_line(xs, [y - k * cx for y, cx in zip(ys, ctx, strict=True)], path)
            if not moved:
                break
        bound = _context_bound(raw, pts, ys, ctx)
        if bound is not None and k + uk > bound[0]:
            uk = max(bound[0] - k, 0.0)
            note = (note + "; " if note else "") + (
                f"at most {1000 * bound[0]:.3g} µs: {bound[1]}'s whole TPOT over its context"
            )
        # the per-sequence cost carries the context term's uncertainty over each decode point's own context
        per_seq = statistics.median(cx / x for x, cx in zip(xs, ctx, strict=True))
        per["uncertainty"] = math.hypot(per["uncertainty"], uk * per_seq)
        return step, per, const(1000.0 * k, 1000.0 * uk, "µs", source, note)
    per_seq_ctx = {round(cx / x) for x, cx in zip(xs, ctx, strict=True) if cx > 0}
    if len(ctx) >= 4 and all(ctx) and max(per_seq_ctx) >= 2 * min(per_seq_ctx) and len(set(xs)) >= 2:
        try:
            coef, se, _ = planefit(list(zip(xs, ctx, strict=True)), ys)
        except ValueError:
            pass
        else:
            return _decode_plane(xs, ctx, coef, se, path)
    step, per = _decode_line(xs, ys, path)
    return step, per, const(0.0, None, "µs", "default", _NO_CTX)


def _context_bound(
    raw: dict[str, Any], pts: list[dict[str, Any]], ys: list[float], ctx: list[float]
) -> tuple[float, str] | None:
    """The context term's upper bound (ms per context token) and where it came from: no decode point's TPOT can
    hold more than its whole self over its context (the step and the cost per sequence are at least 0). With one
    burst only (a busy API server's 70 streams over 97k tokens: 0.052 µs) it bounds a term the context phase left
    at 0 ± 0.37 µs, which the twin's answer's range took from 202 down to 18 req/s. None without a context."""
    path = raw.get("path_latency")
    got = [(y / cx, "a TPOT point") for y, cx in zip(ys, ctx, strict=True) if cx > 0 and y > 0]
    for b in _decode_bursts(raw):
        y = float(b["decode_tpot_ms"]) - tpot_excess(path, float(b["streams"]))
        if y > 0:
            got.append((y / float(b["decode_context_tokens"]), "a burst"))
    return min(got) if got else None


def _context_term(
    pts: list[dict[str, Any]], xs: list[float], ys: list[float], ctx: list[float]
) -> tuple[float, Line] | None:
    """The context term (ms per context token, at least 0, and its line) from the context phase's own points alone:
    one batch size at three context lengths, measured in turn, so a load that came or went between phases does not
    enter; None where the points are not there (a profile from before the phase measured its short prompt too)."""
    own = [i for i, p in enumerate(pts) if p.get("phase") == CONTEXT]
    cx = [ctx[i] for i in own]
    if len(own) < 3 or len({xs[i] for i in own}) != 1 or min(cx) <= 0 or max(cx) < 2 * min(cx):
        return None
    try:
        line = linfit(cx, [ys[i] for i in own])
    except ValueError:
        return None
    return max(line.b, 0.0), line


def _decode_plane(
    xs: list[float], ctx: list[float], coef: list[float], se: list[float], path: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The plane's constants, each with SIGMAS standard errors (floored at the timing resolution over the span
    of its x) and the own-path correction's size (as for the line)."""
    lo, hi = tpot_excess(path, 1.0), tpot_excess(path, max(xs))
    ua = math.hypot(max(SIGMAS * se[0], RESOLUTION_MS), lo)
    ub = math.hypot(
        max(SIGMAS * se[1], RESOLUTION_MS / (max(xs) - min(xs))),
        abs(hi - lo) / (max(xs) - 1.0) if max(xs) > 1 else 0.0,
    )
    uk = max(SIGMAS * se[2], RESOLUTION_MS / (max(ctx) - min(ctx)))
    note = None if coef[2] >= 0 else f"the fit said {1000 * coef[2]:.3g} µs (below 0): 0"
    return (
        const(max(coef[0], 0.0), ua, "ms", "fit"),
        const(max(coef[1], 0.0), ub, "ms", "fit"),
        const(max(1000.0 * coef[2], 0.0), 1000.0 * uk, "µs", "fit", note),
    )


def _decode_line(
    xs: list[float], ys: list[float], path: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        line = linfit(xs, ys)
    except ValueError:
        per = _DEFAULTS.decode_per_seq_ms
        if not ys:
            return (
                const(_DEFAULTS.decode_step_ms, None, "ms", "default"),
                const(per, None, "ms", "default"),
            )
        step = statistics.mean(y - per * x for x, y in zip(xs, ys, strict=True))
        return (
            const(step, None, "ms", "fit", "one batch size only: decode_per_seq_ms is the default"),
            const(per, None, "ms", "default"),
        )
    # the correction is measured at another moment than the points, on a machine whose load comes and goes: it is
    # known only to about its own size, which joins the uncertainty
    lo, hi = tpot_excess(path, 1.0), tpot_excess(path, max(xs))
    ua = math.hypot(line.ua, lo)
    ub = math.hypot(line.ub, abs(hi - lo) / (max(xs) - 1.0) if max(xs) > 1 else 0.0)
    return (const(max(line.a, 0.0), ua, "ms", "fit"), const(max(line.b, 0.0), ub, "ms", "fit"))


def _decode_bursts(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for b in raw.get("bursts") or []
        if b.get("decode_tpot_ms") and b.get("decode_context_tokens") and b.get("streams")
    ]


def _burst_context(
    raw: dict[str, Any], step: dict[str, Any], per: dict[str, Any]
) -> tuple[float, float] | None:
    """The context term (ms per context token) and its uncertainty from the batch bursts' decode TPOT: B streams
    over C context tokens read `step + per × B + k × C` (the twin's own excess at B taken out). Its uncertainty:
    3 standard errors over the bursts, or what the step's and the per-sequence cost's uncertainties move it by,
    whichever is larger. None: fewer than 2 bursts with a decode reading."""
    bursts = _decode_bursts(raw)
    if len(bursts) < 2:
        return None
    path = raw.get("path_latency")
    ks, moved = [], []
    for b in bursts:
        n, cx = float(b["streams"]), float(b["decode_context_tokens"])
        left = float(b["decode_tpot_ms"]) - tpot_excess(path, n) - step["value"] - per["value"] * n
        ks.append(left / cx)
        moved.append(math.hypot(step["uncertainty"] or 0.0, (per["uncertainty"] or 0.0) * n) / cx)
    sem = statistics.stdev(ks) / math.sqrt(len(ks))
    return max(statistics.mean(ks), 0.0), max(SIGMAS * sem, statistics.mean(moved))
