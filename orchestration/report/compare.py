"""Several runs side by side: how their setups differ, then every metric, absolute and % change against the first run,
and one verdict per change (`verdict`): better or worse only where a test says the difference is significant."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestration.report.findings import Finding
from orchestration.report.postprocess import RunData
from vllm_users.measure import metric_keys as K

_HEAD, _TAIL = K.rows(compared=True)  # the declared metrics compared, before and after the latency rows
HEADLINE = tuple(k.name for k in _HEAD)
STATS = ("mean", "median", "std")  # then every percentile field the runs have (their --metric-percentiles)
# the server's figures and the gate's error rate have no declaration: their direction by their names
HIGHER_BETTER = ("throughput", "goodput", "tokens_per_s", "hit_rate")
LOWER_BETTER = ("_ms", "duration_diff")
# The applied load and the workload: runs that differ in any of these are different experiments, said before any
# difference (a warning, not a refusal). (key, label), read from the result, else from its meta.
SETUP: tuple[tuple[str, str], ...] = (
    ("model_id", "model"),
    ("backend", "backend"),
    ("endpoint", "endpoint"),
    ("users", "users"),
    ("request_rate", "request rate (req/s)"),
    ("burstiness", "burstiness"),
    ("max_concurrency", "max concurrency"),
    ("num_prompts", "num prompts"),
    ("run_time", "run time"),
    ("input_len", "input length"),
    ("output_len", "output length"),
    ("range_ratio", "range ratio"),
    ("prefix_len", "prefix length"),
    ("cache_rate", "cache rate"),
    ("version", "server version"),
    ("tool_version", "tool version"),
)
# settings a run may not have recorded: absent is unknown, not a different value (load settings absent: not set)
IDENTITY = ("model_id", "backend", "version", "tool_version")
# the verdicts a change can get; only the first two are coloured
BETTER, WORSE, NO_DIFFERENCE, NOT_TESTED, NEUTRAL = (
    "better",
    "worse",
    "no significant difference",
    "not tested",
    "neutral",
)


def direction(metric: str) -> str | None:
    """'higher' or 'lower' is better, or None for neutral fields (counts, settings)."""
    if K.declared(metric) is not None:
        return K.better(metric)
    if any(k in metric for k in HIGHER_BETTER):
        return "higher"
    if any(k in metric for k in LOWER_BETTER):
        return "lower"
    return None


def metric_names(results: Sequence[dict[str, Any]]) -> list[str]:
    """The scalar metrics to compare, in a stable reading order."""
    names = list(HEADLINE)
    for m in K.LATENCIES:
        names += [m.key(s) for s in STATS]
        pcts: dict[str, float] = {}
        for r in results:
            pcts.update({k: float(p) for k, p in K.percentile_keys(r, m.name)})
        names += sorted(pcts, key=pcts.__getitem__)
    names += [k.name for k in _TAIL]
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
            sig = t.get(name)
            changes.append(
                {"abs": v - base, "pct": pct, "verdict": verdict(base, v, d, sig), "significance": sig}
            )
        rows.append({"metric": name, "better": d, "values": vals, "changes": changes})
    return {
        "baseline": runs[0].name,
        "runs": [r.name for r in runs],
        "setup_differences": setup_differences(runs),
        "rows": rows,
        "warnings": _mismatches(runs),
    }


def verdict(base: float, v: float, better: str | None, sig: dict[str, Any] | None) -> str:
    """The one verdict on a change, for every format: better/worse only when its test found it significant."""
    if better is None:
        return NEUTRAL
    if not sig or sig.get("significant") is None:
        return NOT_TESTED
    if not sig["significant"] or v == base:
        return NO_DIFFERENCE
    return BETTER if (v > base) == (better == "higher") else WORSE


def _setting(res: dict[str, Any], key: str) -> Any:
    v = res.get(key)
    return v if v is not None else (res.get("meta") or {}).get(key)


def setup_differences(runs: Sequence[RunData]) -> list[dict[str, Any]]:
    """The settings of the applied load and workload that differ between the runs: [{setting, label, values}]."""
    out = []
    for key, label in SETUP:
        vals = [_setting(r.result, key) for r in runs]
        unset_vs_set = key not in IDENTITY and None in vals and any(v is not None for v in vals)
        if unset_vs_set or len({repr(v) for v in vals if v is not None}) > 1:
            out.append({"setting": key, "label": label, "values": vals})
    return out


def describe_setup_differences(comparison: dict[str, Any]) -> list[str]:
    """One line per differing setting: 'users: a=4, b=8'."""
    return [
        f"{d['label']}: "
        + ", ".join(
            f"{n}={'-' if v is None else v}" for n, v in zip(comparison["runs"], d["values"], strict=True)
        )
        for d in comparison.get("setup_differences") or []
    ]


def _mismatches(runs: Sequence[RunData]) -> list[str]:
    """Differences in scenario mix or source that make the comparison apples to oranges (settings: above)."""
    out = []
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


# ------------------------------------------------------------------------------------- the lead
LEAD_METRICS = 3  # the largest significant changes the lead names


def _significant(comparison: dict[str, Any], i: int, word: str) -> list[tuple[str, float, str]]:
    """(metric, % change, test) of compared run i's changes with verdict `word`, largest change first."""
    out = []
    for row in comparison["rows"]:
        c = row["changes"][i]
        if c["verdict"] == word and c.get("pct") is not None:
            out.append((row["metric"], float(c["pct"]), str((c.get("significance") or {}).get("test"))))
    return sorted(out, key=lambda t: -abs(t[1]))


def _named(changes: list[tuple[str, float, str]]) -> str:
    more = len(changes) - LEAD_METRICS
    text = ", ".join(f"{m} {pct:+.1f} %" for m, pct, _ in changes[:LEAD_METRICS])
    return text + (f" and {more} more" if more > 0 else "")


def lead(comparison: dict[str, Any]) -> list[str]:
    """Per compared run, which run is worse and by how much where a test found it significant (the comparison's
    first lines); a different setup is said with it, since then no change is a regression."""
    base = comparison["baseline"]
    setups = bool(comparison.get("setup_differences"))
    lines = []
    for i, name in enumerate(comparison["runs"][1:]):
        worse, better = _significant(comparison, i, WORSE), _significant(comparison, i, BETTER)
        tested = sum(
            bool((r["changes"][i].get("significance") or {}).get("test")) for r in comparison["rows"]
        )
        if not worse and not better:
            lines.append(f"{name} vs {base}: no significant difference ({tested} metrics tested).")
            continue
        tests = sorted({t for *_, t in worse + better})
        parts = []
        if worse:
            parts.append(f"{name} is worse than {base}: {_named(worse)}")
        if better:
            parts.append(f"{'better' if worse else f'{name} is better than {base}'}: {_named(better)}")
        said = "; ".join(parts) + f" (significant: {', '.join(tests)}, Holm-corrected, {tested} tested)"
        lines.append(said + (": the setups differ, a different experiment." if setups else "."))
    return lines


def regressions(comparison: dict[str, Any]) -> list[Finding]:
    """A finding on each compared run that is significantly worse than the baseline under the same setup (the same
    load and workload): a regression. A different setup is a different experiment, never a regression."""
    if comparison.get("setup_differences") or comparison.get("warnings"):
        return []
    base = comparison["baseline"]
    out = []
    for i, name in enumerate(comparison["runs"][1:]):
        worse = _significant(comparison, i, WORSE)
        if worse:
            out.append(
                Finding(
                    "significant_regression",
                    name,
                    "warning",
                    f"Significantly worse than {base}",
                    "a metric worse than the baseline's where its test finds it significant (Holm-corrected, "
                    "family-wise error 1 %), the load and workload alike",
                    f"{_named(worse)} ({', '.join(sorted({t for *_, t in worse}))})",
                    f"The same load got worse answers than on {base}: what changed between them (server flags, "
                    "version, hardware, a neighbour on the GPU)? `vllm-locust report` lists every metric with "
                    "its test; --repeats on both tests the throughputs and tails too.",
                )
            )
    return out
