"""Is a difference between two runs real? One test per compared metric, named in the report.

- Both runs repeated (`--repeats`, >= 2 each): Welch's t-test on the per-repeat values of every metric.
- Otherwise, for the mean/median of TTFT, TPOT, ITL and E2EL: Mann-Whitney U on the per-request samples,
  and a difference must also be at least MIN_EFFECT of the baseline median: requests of one run are not
  independent (they share queues and the machine's mood), so a per-request test alone overstates certainty.
  Other metrics of single runs have one value per run: "not tested" (use --repeats).

With two repeats a t-test has one degree of freedom: use three or more to detect moderate changes.
Holm's correction runs over every metric tested for a pair (family-wise error ALPHA), so comparing ~30
metrics does not turn noise into a finding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from orchestration.report.stats import TwoSampleTest, holm, mann_whitney_u, welch_t_test

ALPHA = 0.01  # family-wise: at most a 1 % chance per comparison that noise is called a change
MIN_EFFECT = 0.05  # single runs: the medians must differ by at least 5 %
SAMPLE_STATS = ("mean", "median")
# std is spread, not level; p50 repeats the median: testing them would only widen the Holm family
UNTESTED_PREFIXES = ("std_", "p50_")
SAMPLE_METRICS = ("ttft", "tpot", "itl", "e2el")


def _repeat_values(run: Any, name: str) -> list[float] | None:
    rep = (run.result.get("repeats") or {}).get("metrics", {}).get(name)
    if not rep:
        return None
    vals = [v for v in rep["values"] if v is not None]
    return vals if len(vals) >= 2 else None


def _sample_metric(name: str) -> str | None:
    """'ttft' for 'median_ttft_ms' and the like; None for metrics without per-request samples."""
    stat, _, rest = name.partition("_")
    metric = rest.removesuffix("_ms")
    return metric if stat in SAMPLE_STATS and metric in SAMPLE_METRICS and rest.endswith("_ms") else None


def compare_pair(base: Any, other: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    """metric -> {test, p_value, significant, detail} (or {test: None, reason}) for `other` against `base`."""
    out: dict[str, dict[str, Any]] = {}
    tested: list[tuple[str, TwoSampleTest, bool]] = []  # name, result, effect large enough
    for name in names:
        if name.startswith(UNTESTED_PREFIXES):
            out[name] = {
                "test": None,
                "significant": None,
                "reason": "spread or a duplicate of the median: not tested",
            }
            continue
        a, b = _repeat_values(base, name), _repeat_values(other, name)
        if a is not None and b is not None:
            tested.append((name, welch_t_test(a, b), True))
            continue
        metric = _sample_metric(name)
        xa, xb = (base.arrays.get(metric), other.arrays.get(metric)) if metric else (None, None)
        if xa is not None and xb is not None and xa.size >= 8 and xb.size >= 8:
            med_a, med_b = float(np.median(xa)), float(np.median(xb))
            effect = abs(med_b - med_a) >= MIN_EFFECT * max(abs(med_a), 1e-12)
            tested.append((name, mann_whitney_u(xa, xb), effect))
            continue
        out[name] = {
            "test": None,
            "significant": None,
            "reason": "one value per run: use --repeats N (>= 2) on both to test it",
        }
    reject = holm([t.p_value for _n, t, _e in tested], ALPHA)
    for (name, t, effect), rej in zip(tested, reject, strict=True):
        detail = t.detail + (", Holm-corrected" if len(tested) > 1 else "")
        if t.test == "Mann-Whitney U":
            detail += f", and medians >= {MIN_EFFECT:.0%} apart"
        out[name] = {
            "test": t.test,
            "p_value": t.p_value,
            "significant": bool(rej and effect),
            "detail": detail,
        }
    return out


def describe(sig: dict[str, Any]) -> str:
    """'significant (Welch's t-test, p=0.001)' / 'not significant (...)' / 'not tested (...)'."""
    if not sig or sig.get("test") is None:
        return "not tested" + (f" ({sig['reason']})" if sig and sig.get("reason") else "")
    word = "significant" if sig["significant"] else "not significant"
    return f"{word} ({sig['test']}, p={sig['p_value']:.2g}; {sig['detail']})"
