"""The twin profile (`twin.json`): built from a probe and its fit, written atomically, printed as a fit table.

Its schema and version belong to the reader, vllm_sim.twin (`KIND`, `VERSION`, `CONSTANTS`, `validate_twin`):
a profile is validated by that same reader before it is written, so what calibrate writes the simulator reads.

    {"kind": "vllm-locust-twin", "version": 1, "created": ISO time,
     "server": {"host", "model", "max_model_len", "version"},
     "probe": {"budget_s", "elapsed_s", "requests", "cut", "partial", "stopped", "errors", "phases", "plan"},
     "constants": {NAME: {"value", "uncertainty", "unit", "source", "note"?}},   # every vllm_sim.twin.CONSTANTS
                                                                               # and OPTIONAL
     "uncertainty": what an uncertainty means,
     "points": {"ttft": [...], "tpot": [...], "saturation": {...}, "prefix": [...]},  # raw, with errors
     "fit": {"ttft": {...}, "tpot": {...}}}                                         # error summaries
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from orchestration.twin.apistage import engine_bound_burst, fit_api
from orchestration.twin.fit import RESOLUTION_MS, SIGMAS, fit_constants
from orchestration.twin.phases import ProbePlan
from orchestration.twin.predict import point_errors
from vllm_sim.twin import KIND, VERSION, validate_twin
from vllm_users.atomic import atomic_json

__all__ = ["build_profile", "fit_table", "write_profile"]


def _summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    if not points:
        return {"points": 0}
    errs = [abs(p["error_pct"]) for p in points]
    return {
        "points": len(points),
        "mean_abs_error_pct": round(sum(errs) / len(errs), 2),
        "max_abs_error_pct": round(max(errs), 2),
        "max_abs_error_ms": round(max(abs(p["error_ms"]) for p in points), 3),
    }


def _api_points(judged: list[dict[str, Any]], measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every API-server burst measured: with the twin's prediction where it has the stage, the engine's own
    bursts (which the stage does not predict) as measured."""
    if not judged:
        return measured
    return judged + [p for p in measured if engine_bound_burst(p)]


def build_profile(
    raw: dict[str, Any], server: dict[str, Any], probe: dict[str, Any], plan: ProbePlan
) -> dict[str, Any]:
    """The whole profile of one probe (validated: a profile this returns, vllm_sim.twin reads)."""
    constants = fit_constants(raw, server)
    errors = point_errors(raw, constants)
    doc = {
        "kind": KIND,
        "version": VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "server": server,
        "probe": {**probe, "plan": dataclasses.asdict(plan)},
        "constants": constants,
        "uncertainty": f"{SIGMAS:g} standard errors of the least-squares fit, at least what a {RESOLUTION_MS} ms "
        "timing resolution allows; 0 for a limit the server shows; null where nothing was measured",
        "points": {
            "ttft": errors["ttft"],
            "tpot": errors["tpot"],
            "saturation": raw.get("saturation"),
            "prefix": raw.get("prefix") or [],
            "tokens_per_word": raw.get("tokens_per_word"),
            "prompt_tokens_estimated": bool(raw.get("prompt_tokens_estimated")),
            "path_latency": raw.get("path_latency"),
            "bursts": errors["bursts"],
            # the API-server bursts (with the twin's prediction where it has the stage) and the local
            # simulator's own, which decide whether the stage is fitted at all
            "api": _api_points(errors["api"], raw.get("api") or []),
            "api_own": raw.get("api_own") or [],
        },
        "api_server": fit_api(raw, int(raw.get("api_processes") or 1))[1],
        "fit": {
            "ttft": _summary(errors["ttft"]),
            "tpot": _summary(errors["tpot"]),
            "bursts": _summary(errors["bursts"]),
            "api": _summary(errors["api"]),
        },
    }
    validate_twin(doc, "the profile being written")
    return doc


def write_profile(path: str, doc: dict[str, Any]) -> None:
    """Write the profile atomically (a reader never sees half of it)."""
    atomic_json(path, doc)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def fit_table(doc: dict[str, Any]) -> str:
    """The constants (value ± uncertainty, source) and every point's measured, predicted and error, as text."""
    lines = [
        f"twin of {doc['server'].get('host')} ({doc['server'].get('model')}): "
        f"{doc['probe'].get('requests', 0)} requests in {doc['probe'].get('elapsed_s', 0):.1f} s"
        + (" (partial: " + str(doc["probe"].get("stopped")) + ")" if doc["probe"].get("partial") else ""),
        f"{'constant':<24} {'value':>12} {'± uncertainty':>14}  source",
        "-" * 66,
    ]
    for name, c in doc["constants"].items():
        unc = "" if c.get("uncertainty") is None else _fmt(c["uncertainty"])
        note = f"  ({c['note']})" if c.get("note") else ""
        lines.append(f"{name:<24} {_fmt(c['value']):>12} {unc:>14}  {c['source']} {c['unit']}{note}")
    for name, c in doc["constants"].items():
        u, v = c.get("uncertainty"), c.get("value")
        if c["source"] in ("fit", "burst") and isinstance(v, float) and v > 0 and u is not None and u >= v:
            lines.append(
                f"not resolved: {name} {_fmt(v)} ± {_fmt(u)} (answers that lean on it are as uncertain"
                + (
                    "; a larger --max-concurrency measures it over more batch sizes)"
                    if name == "decode_per_seq_ms"
                    else ")"
                )
            )
    for kind, x, xname in (("ttft", "prompt_tokens", "prompt"), ("tpot", "batch", "batch")):
        pts = doc["points"][kind]
        if not pts:
            lines.append(f"{kind.upper()}: no points")
            continue
        # the decode points' context (tokens in all)
        ctx = kind == "tpot" and any(p.get("context_tokens") for p in pts)
        lines.append(
            f"{kind.upper()} points: {xname:>7} {'measured':>10} {'twin':>10} {'error':>9}"
            + ("  context" if ctx else "")
        )
        for p in pts:
            lines.append(
                f"{'':<12} {p[x]:>7} {p[kind + '_ms']:>8.2f}ms {p['predicted_ms']:>8.2f}ms "
                f"{p['error_pct']:>+8.1f}%" + (f"  {p.get('context_tokens') or 0:>7.0f}" if ctx else "")
            )
        s = doc["fit"][kind]
        lines.append(
            f"{'':<12} mean |error| {s['mean_abs_error_pct']:.1f} %, max {s['max_abs_error_pct']:.1f} %"
        )
    for b in doc["points"].get("bursts") or []:  # the batch phase: the last of B prompts' first token
        lines.append(
            f"burst: {b['streams']} x {b['prompt_tokens']:.0f} tokens at once, last TTFT "
            f"{b['last_ttft_ms']:.2f}ms, twin {b['predicted_ms']:.2f}ms ({b['error_pct']:+.1f}%)"
        )
    for line in doc.get("api_server") or []:
        lines.append(f"API server: {line}")
    for p in (doc["points"].get("api") or []) if doc["fit"].get("api", {}).get("points") else []:
        if "predicted_ms" not in p:  # the engine's own burst: the twin's engine is judged by the other points
            continue
        what = (
            f"{p['requests']} x {p['prompt_tokens']:.0f}-token requests, {p['per_request_ms']:.3f} ms each"
            if p["kind"] == "request"
            else f"{p['streams']} streams, {p['per_chunk_ms']:.4f} ms per chunk"
        )
        lines.append(f"API burst: {what}, twin {p['predicted_ms']:.4g}ms ({p['error_pct']:+.1f}%)")
    return "\n".join(lines)
