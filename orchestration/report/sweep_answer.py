"""The answer of a sweep in words, before its table (console and report alike): judged against an SLO
(`--goodput`), the heaviest step within it and the step that missed it next; without one, the peak output
throughput and the latency at the lightest load. No figure here: the console imports it without matplotlib."""

from __future__ import annotations

import math
from typing import Any

from vllm_users.measure import metric_keys as K

__all__ = ["load_order", "number", "slo_answer", "sweep_headline"]


def number(v: Any) -> float | None:
    """`v` as a float when it is a finite number (not a bool), else None."""
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def load_order(s: dict[str, Any]) -> tuple[int, float]:
    """Where a step stands in its sweep's load: the synchronous step (1 user) first, the throughput step (every
    request at once) last, the others by their target (a rate or a number of users), else their achieved rate.
    Not the achieved rate alone: an overloaded step can complete fewer requests per second than a lighter one."""
    if s.get("kind") == "synchronous":
        return (0, 0.0)
    if s.get("kind") == "throughput":
        return (2, 0.0)
    t = number(s.get("target"))
    return (1, t if t is not None else (number(s.get("achieved_rate")) or 0.0))


def slo_answer(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """A sweep judged against an SLO: (the heaviest step that held it, the lightest step heavier than that one
    that did not), by load_order; (None, None) without verdicts."""
    judged = sorted(
        (s for s in doc.get("steps") or [] if s.get("verdict") in ("holds", "fails")), key=load_order
    )
    held = [s for s in judged if s["verdict"] == "holds"]
    best = held[-1] if held else None
    miss = next(
        (s for s in judged if s["verdict"] == "fails" and (best is None or load_order(s) > load_order(best))),
        None,
    )
    return best, miss


def _slo_text(doc: dict[str, Any]) -> str:
    slo = " ".join(f"{k}:{v:g}ms" for k, v in (doc.get("slo_ms") or {}).items()) or "each class's own"
    return f"{slo} at p{float(doc.get('slo_percentile') or 99.0):g}, failures <= {float(doc.get('max_error_rate') or 0.0):.1%}"


def _step_text(s: dict[str, Any], achieved: str = "") -> str:
    rate = number(s.get("achieved_rate"))
    said = f" ({rate:.3g} req/s{' ' + achieved if achieved else ''})" if rate is not None else ""
    return f"{s.get('label') or s.get('name')}{said}"


def _reasons(s: dict[str, Any]) -> str:
    return "; ".join((s.get("judgement") or {}).get("reasons") or []) or "no reason recorded"


def _slo_headline(doc: dict[str, Any]) -> list[str]:
    best, miss = slo_answer(doc)
    slo = _slo_text(doc)
    failed = sorted((s for s in doc.get("steps") or [] if s.get("verdict") == "fails"), key=load_order)
    if best is None:
        if miss is None:
            return [f"No step was judged against the SLO ({slo})."]
        return [
            f"No step held the SLO ({slo}): the lightest, {_step_text(miss)}, missed it: {_reasons(miss)}."
        ]
    line = f"Highest load within the SLO ({slo}): {_step_text(best, 'achieved')}"
    if miss is not None:
        return [f"{line}; the next load, {_step_text(miss)}, missed it: {_reasons(miss)}."]
    if failed:  # only lighter steps failed: the SLO sits within these steps' noise
        return [f"{line}; but a lighter load, {_step_text(failed[0])}, missed it: {_reasons(failed[0])}."]
    return [f"Every step held the SLO ({slo}), the heaviest too: {_step_text(best, 'achieved')}."]


def sweep_headline(doc: dict[str, Any]) -> list[str]:
    """The answer of a sweep in a sentence or two: with an SLO, the heaviest step within it and the step that
    missed it next; without, the peak output throughput and the latency at the lightest load."""
    steps = [s for s in doc.get("steps") or [] if number(s.get("achieved_rate")) is not None]
    if not steps:
        return ["No step completed a request."] if doc.get("steps") else []
    if doc.get("slo_ms") is not None:
        return _slo_headline(doc)
    peak = max(
        (s for s in steps if number(s.get(K.OUTPUT_THROUGHPUT)) is not None),
        key=lambda s: s[K.OUTPUT_THROUGHPUT],
        default=None,
    )
    out = []
    if peak is not None:
        out.append(
            f"Peak output throughput: {peak[K.OUTPUT_THROUGHPUT]:.1f} tok/s at step {_step_text(peak)}."
        )
    light = min(steps, key=load_order)
    lat = [
        f"{name} p50 {v:.3g} ms"
        for name, key in (("TTFT", "ttft_p50_ms"), ("TPOT", "tpot_p50_ms"))
        if (v := number(light.get(key))) is not None
    ]
    if lat:
        out.append(f"At the lightest load, {_step_text(light)}: " + ", ".join(lat) + ".")
    return out
