"""Several runs side by side: every metric, absolute and % change against the first run, which is better."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestration.report.postprocess import RunData
from vllm_users.measure.metric_keys import percentile_keys

HEADLINE = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
)
STATS = ("mean", "median", "std")  # then every percentile field the runs have (their --metric-percentiles)
LATENCY = ("ttft", "tpot", "itl", "e2el")
HIGHER_BETTER = ("throughput", "goodput", "tokens_per_s", "completed", "hit_rate", "validity_rate")
LOWER_BETTER = ("_ms", "failed", "duration_diff")
SAME_EPS = 0.005  # changes under 0.5 % are called "same": run-to-run noise is larger than that
# Settings that make two runs incomparable when they differ (a warning, not a refusal).
SETTINGS = ("model_id", "backend", "input_len", "output_len", "endpoint", "version", "tool_version")


def direction(metric: str) -> str | None:
    """'higher' or 'lower' is better, or None for neutral fields (counts of settings)."""
    if metric in ("duration", "max_concurrent_requests"):
        return None
    if any(k in metric for k in HIGHER_BETTER):
        return "higher"
    if any(metric.endswith(k) or k in metric for k in LOWER_BETTER):
        return "lower"
    return None


def metric_names(results: Sequence[dict[str, Any]]) -> list[str]:
    """The scalar metrics to compare, in a stable reading order."""
    names = list(HEADLINE)
    for m in LATENCY:
        for s in STATS:
            names.append(f"{s}_{m}_ms")
        pcts: dict[str, float] = {}
        for r in results:
            pcts.update({k: float(p) for k, p in percentile_keys(r, m)})
        names += sorted(pcts, key=pcts.__getitem__)
    names += ["prefix_cache_hit_rate", "validity_rate", "chunk_token_ratio"]
    names += [
        "server_prefix_cache_hit_rate",
        "server_kv_cache_usage_peak",
        "server_ttft_p50_ms",
        "server_ttft_p99_ms",
        "server_queue_time_p99_ms",
    ]
    return [n for n in names if any(_value(r, n) is not None for r in results)]


def _value(res: dict[str, Any], name: str) -> float | None:
    if name.startswith("server_"):
        sm = res.get("server_metrics") or {}
        key = name[len("server_") :]
        for hist in ("ttft", "queue_time"):
            if key.startswith(hist + "_p") or key.startswith(hist + "_mean"):
                stat = key[len(hist) + 1 :].removesuffix("_ms")
                v = (sm.get(f"{hist}_ms") or {}).get(stat)
                return float(v) if isinstance(v, int | float) else None
        v = sm.get(key)
    else:
        v = res.get(name)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def compare(runs: Sequence[RunData]) -> dict[str, Any]:
    """Table rows: metric, values per run, change vs the first run (absolute, %), verdict per run."""
    from orchestration.report.significance import compare_pair  # capacity imports this module

    results = [r.result for r in runs]
    names = metric_names(results)
    tests = [compare_pair(runs[0], r, names) for r in runs[1:]]
    rows = []
    for name in names:
        vals = [_value(r, name) for r in results]
        base = vals[0]
        d = direction(name)
        changes: list[dict[str, Any]] = []
        for v, t in zip(vals[1:], tests, strict=True):
            if base is None or v is None:
                changes.append({"abs": None, "pct": None, "verdict": "n/a", "significance": None})
                continue
            pct = (v - base) / abs(base) * 100.0 if base else None
            changes.append(
                {"abs": v - base, "pct": pct, "verdict": _verdict(base, v, d), "significance": t.get(name)}
            )
        rows.append({"metric": name, "better": d, "values": vals, "changes": changes})
    return {
        "baseline": runs[0].name,
        "runs": [r.name for r in runs],
        "rows": rows,
        "warnings": _mismatches(runs),
    }


def _verdict(base: float, v: float, d: str | None) -> str:
    if d is None:
        return "neutral"
    scale = max(abs(base), abs(v), 1e-12)
    if abs(v - base) / scale < SAME_EPS:
        return "same"
    up = v > base
    return "better" if up == (d == "higher") else "worse"


def _mismatches(runs: Sequence[RunData]) -> list[str]:
    """Differences in settings or scenario mix that make the comparison apples to oranges."""
    out = []
    for key in SETTINGS:
        seen = {
            r.name: (
                r.result.get(key) if r.result.get(key) is not None else (r.result.get("meta") or {}).get(key)
            )
            for r in runs
        }
        if len({repr(v) for v in seen.values() if v is not None}) > 1:
            out.append(f"runs differ in {key}: " + ", ".join(f"{n}={v}" for n, v in seen.items()))
    mixes = {r.name: ",".join(sorted(r.result.get("per_scenario") or {})) for r in runs}
    if len(set(mixes.values())) > 1:
        out.append("runs differ in scenarios: " + ", ".join(f"{n}=[{v}]" for n, v in mixes.items()))
    sources = {r.source for r in runs}
    if len(sources) > 1:
        out.append(
            "runs come from different sources ("
            + ", ".join(sorted(sources))
            + "): CSV figures are approximate"
        )
    return out
