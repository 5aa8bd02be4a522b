"""Each rule's verdict: a confidence interval of the candidate's change against the baseline, read against the
rule's limit.

How the interval is made depends on what each side holds:
- one run each: a circular block bootstrap of each run's per-request samples (orchestration.gate.statistics),
  the two sides resampled independently;
- repeats on both sides (>= 2 each): Welch's t-interval of the difference of the repeats' means, so the noise is
  the repeats' own spread, run-to-run variation included;
- repeats on one side only: a t prediction interval, the single run taken as one more draw of the repeated
  side's run-to-run spread.
The verdicts are family-wise: each is a one-sided claim (worse past the limit, better past it, or within it on
both sides: two one-sided tests), so each rule's two-sided interval is at 1 - 2 (1 - confidence) / rules
(Bonferroni): the chance that noise makes any rule of the gate regress is at most 1 - confidence.

Verdicts, from the interval [lo, hi] of the change in the regressing direction (a non-inferiority test):
regressed when lo > limit, the candidate is worse by more than the rule allows, with confidence; improved when
hi < -limit, the mirror image; unchanged when the interval lies within the limit either way; inconclusive
otherwise (more requests or --repeats would tell). A change within the limit is not flagged at any sample
size, and a change only as large as the noise is not flagged: its interval reaches back past the limit.
Requests of one run do not show run-to-run variation (the machine's load, the server's state): between two
single runs the limit is also the margin for it, which is why the limits are a few percent, not zero.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from orchestration.gate.rules import Rule
from orchestration.gate.samples import RunSamples, Side
from orchestration.gate.statistics import MIN_SAMPLES, Statistic, statistic_for
from orchestration.report.stats import t_quantile
from vllm_users import exit_codes

__all__ = [
    "CONFIDENCE",
    "RESAMPLES",
    "TOOL",
    "GateReport",
    "RuleResult",
    "evaluate",
    "gate",
    "level_per_rule",
]

CONFIDENCE = 0.95  # family-wise, over every rule of one gate
RESAMPLES = (
    2000  # bootstrap resamples per side and rule, at least; more when the tails need them (TAIL_DRAWS)
)
TAIL_DRAWS = 20  # resamples beyond each end of an interval: a 5-rule gate's 1 % tails get 20 of 2000
VERDICTS = ("regressed", "improved", "unchanged", "inconclusive")
TOOL = "vllm-locust gate"


@dataclass(frozen=True)
class RuleResult:
    """One rule's outcome: values, change and its interval in the limit's unit, verdict and how it was found."""

    rule: str
    metric: str
    limit: float
    unit: str  # "%" | "pp" | "abs"
    worse: str  # "higher" | "lower" | "either"
    baseline: float | None
    candidate: float | None
    change: float | None  # candidate - baseline in the limit's unit (%, pp or the metric's unit)
    ci_low: float | None
    ci_high: float | None
    verdict: str
    method: str
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        """Plain dict for JSON."""
        return asdict(self)

    def signed(self, x: float | None) -> str:
        """A change or a bound in the rule's unit: '+12.3%', '+0.50pp', '+4.1'; '-' when there is none."""
        if x is None:
            return "-"
        return {"%": f"{x:+.1f}%", "pp": f"{x:+.2f}pp"}.get(self.unit, f"{x:+.4g}")


@dataclass
class GateReport:
    """Everything one gate decided."""

    baseline: str  # Side.describe()
    candidate: str
    confidence: float  # family-wise
    level: float  # each rule's interval
    results: list[RuleResult]
    exit_code: int
    allowed_mismatches: dict[str, list[Any]] = field(default_factory=dict)
    seed: int = 0
    resamples: int = RESAMPLES
    load_notes: list[str] = field(default_factory=list)  # a side whose open loop did not get its rate

    @property
    def not_delivered(self) -> str:
        """' (LOAD NOT DELIVERED: candidate run-1)' when a side's load fell short of its offered rate, else ''."""
        return f" (LOAD NOT DELIVERED: {'; '.join(self.load_notes)})" if self.load_notes else ""

    @property
    def regressed(self) -> list[RuleResult]:
        """The rules that regressed."""
        return [r for r in self.results if r.verdict == "regressed"]

    def headline(self) -> str:
        """One line: 'no regression (5 rules: 3 unchanged, 2 inconclusive)' or 'REGRESSED: ...'."""
        counts = {
            v: sum(r.verdict == v for r in self.results)
            for v in ("regressed", "improved", "unchanged", "inconclusive")
        }
        tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        if self.regressed:
            names = ", ".join(f"{r.metric} ({r.signed(r.change)})" for r in self.regressed)
            return f"REGRESSED: {names} ({len(self.results)} rules: {tally}){self.not_delivered}"
        return f"no regression ({len(self.results)} rules: {tally}){self.not_delivered}"

    def method(self) -> str:
        """How the intervals were made (one paragraph)."""
        return (
            f"Verdicts: {self.confidence:.0%} family-wise over {len(self.results)} rules (Bonferroni: each "
            f"interval {self.level:.1%}, each verdict one-sided at {(1 - self.level) / 2:.2%}), from the per-request samples by a circular block bootstrap ({self.resamples} "
            "resamples per side; blocks of "
            "consecutive requests or time buckets: requests that run together are not independent), or "
            "from the repeats' own spread when a side has --repeats. A rule regresses when its whole "
            "interval lies past its limit; unchanged when it lies within the limit; inconclusive otherwise "
            f"(more requests or --repeats would tell). Bootstrap seed {self.seed}."
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "tool": TOOL,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "confidence": self.confidence,
            "level_per_rule": self.level,
            "seed": self.seed,
            "resamples": self.resamples,
            "headline": self.headline(),
            "regressed": [r.metric for r in self.regressed],
            "exit_code": self.exit_code,
            "allowed_mismatches": self.allowed_mismatches,
            "load_not_delivered": self.load_notes,
            "method": self.method(),
            "rules": [r.to_dict() for r in self.results],
        }


def level_per_rule(confidence: float, rules: int) -> float:
    """The two-sided level of each rule's interval for a family-wise `confidence` of its one-sided verdicts
    (Bonferroni): 0.98 for 5 rules at 0.95."""
    return 1.0 - 2.0 * (1.0 - confidence) / max(1, rules)


def _value(stat: Statistic | None, run: RunSamples, metric: str) -> float | None:
    """The metric on one run: from its samples when they define it, else the result's figure."""
    if stat is not None:
        return stat.point(run)
    return run.figures.get(metric)


def _values(stat: Statistic | None, side: Side, metric: str) -> list[float]:
    return [v for r in side.runs if (v := _value(stat, r, metric)) is not None and math.isfinite(v)]


def _seed(seed: int, metric: str, side: int) -> np.random.Generator:
    """One stream per (seed, metric, side): a rule's interval does not move when another rule is added."""
    return np.random.default_rng([seed, zlib.crc32(metric.encode()), side])


def _bootstrap(
    stat: Statistic, base: RunSamples, cand: RunSamples, level: float, resamples: int, seed: int
) -> tuple[float, float, float, float, str] | str:
    """(baseline, candidate, lo, hi of candidate - baseline, method), or why there is no interval."""
    b, c = stat.point(base), stat.point(cand)
    if b is None or c is None:
        return "no samples of it on " + ("the baseline" if b is None else "the candidate")
    nb, nc = stat.size(base), stat.size(cand)
    if min(nb, nc) < MIN_SAMPLES:
        return f"too few samples for an interval ({nb} and {nc}; at least {MIN_SAMPLES} each)"
    db, how_b = stat.resample(base, resamples, _seed(seed, stat.name, 0))
    dc, how_c = stat.resample(cand, resamples, _seed(seed, stat.name, 1))
    diffs = (c - b) + (dc - db)
    diffs = diffs[np.isfinite(diffs)]  # a resample with no value at all (every drawn request without a gap)
    lo, hi = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    how = f"{how_b.replace(',', ' each,', 1)}" if how_b == how_c else f"{how_b} | {how_c}"
    return b, c, float(lo), float(hi), f"block bootstrap: {how}"


def _welch(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float, str]:
    """Interval of mean(b) - mean(a) over repeats (Welch), or of b - mean(a) / mean(b) - a for a single run."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d = float(y.mean() - x.mean())
    if x.size >= 2 and y.size >= 2:
        vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
        se = math.sqrt(vx + vy)
        df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1)) if se > 0 else 1.0
        how = f"Welch t-interval over repeats ({x.size}+{y.size})"
    else:  # one side is one run: a prediction interval from the other side's spread
        rep = x if x.size >= 2 else y
        se = float(rep.std(ddof=1)) * math.sqrt(1.0 + 1.0 / rep.size)
        df = rep.size - 1.0
        how = f"t prediction interval: 1 run against {rep.size} repeats"
    half = t_quantile(0.5 + level / 2.0, df) * se if se > 0 else 0.0
    return d - half, d + half, how


def _in_unit(rule: Rule, d: float, base: float) -> float | None:
    """A change in the rule's unit; None when relative to a baseline of 0."""
    if rule.unit == "%":
        return None if base == 0 else d / abs(base) * 100.0
    return d * 100.0 if rule.unit == "pp" else d


def _verdict(worse: str, limit: float, lo: float, hi: float) -> str:
    """regressed / improved / unchanged / inconclusive of a change's interval [lo, hi] (in the limit's unit)."""
    if worse == "either":  # no better direction: a change past the limit either way is what the rule forbids
        if lo > limit or hi < -limit:
            return "regressed"
        return "unchanged" if -limit <= lo and hi <= limit else "inconclusive"
    sign = 1.0 if worse == "higher" else -1.0
    wlo, whi = sorted((sign * lo, sign * hi))  # the interval of the change in the regressing direction
    if wlo > limit:
        return "regressed"
    if whi < -limit:
        return "improved"
    return "unchanged" if -limit <= wlo and whi <= limit else "inconclusive"


def evaluate(
    rule: Rule, base: Side, cand: Side, *, level: float, resamples: int = RESAMPLES, seed: int = 0
) -> RuleResult:
    """The verdict of one rule (its interval at two-sided `level`)."""
    stat = statistic_for(rule.metric)
    bv, cv = _values(stat, base, rule.metric), _values(stat, cand, rule.metric)

    def result(
        verdict: str,
        method: str,
        reason: str = "",
        change: float | None = None,
        lo: float | None = None,
        hi: float | None = None,
    ) -> RuleResult:
        return RuleResult(
            rule.text,
            rule.metric,
            rule.limit,
            rule.unit,
            rule.worse,
            float(np.mean(bv)) if bv else None,
            float(np.mean(cv)) if cv else None,
            change,
            lo,
            hi,
            verdict,
            method,
            reason,
        )

    if not bv or not cv:
        return result(
            "inconclusive",
            "not tested",
            f"no value of {rule.metric} on " + ("the baseline" if not bv else "the candidate"),
        )
    if base.repeated or cand.repeated:
        if len(bv) < 2 and len(cv) < 2:
            return result("inconclusive", "not tested", "fewer than two repeats with a value")
        lo, hi, how = _welch(bv, cv, level)
        d, b0 = float(np.mean(cv) - np.mean(bv)), float(np.mean(bv))
    elif stat is None:
        return result(
            "inconclusive",
            "not tested",
            f"{rule.metric} has no per-request samples, one value per "
            "run: use --repeats N (>= 2) on a side to test it",
        )
    else:
        got = _bootstrap(stat, base.runs[0], cand.runs[0], level, resamples, seed)
        if isinstance(got, str):
            return result("inconclusive", "not tested", got)
        b0, c0, lo, hi, how = got
        d = c0 - b0
    change, clo, chi = _in_unit(rule, d, b0), _in_unit(rule, lo, b0), _in_unit(rule, hi, b0)
    if change is None or clo is None or chi is None:
        if lo == 0 == hi:
            return result("unchanged", how, "0 on both sides", 0.0, 0.0, 0.0)
        return result(
            "inconclusive",
            how,
            "the baseline is 0: a relative change is undefined (give an absolute "
            "limit, such as error_rate:0.5pp)",
        )
    return result(_verdict(rule.worse, rule.limit, clo, chi), how, "", change, clo, chi)


def gate(
    base: Side,
    cand: Side,
    rules: Sequence[Rule],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
    allowed: dict[str, list[Any]] | None = None,
) -> GateReport:
    """Every rule's verdict for `cand` against `base`; the report's exit code is GATE_REGRESSED when one
    regressed, OK otherwise."""
    level = level_per_rule(confidence, len(rules))
    resamples = max(resamples, math.ceil(2 * TAIL_DRAWS / (1.0 - level)))
    results = [evaluate(r, base, cand, level=level, resamples=resamples, seed=seed) for r in rules]
    code = exit_codes.GATE_REGRESSED if any(r.verdict == "regressed" for r in results) else exit_codes.OK
    notes = [
        f"{name} {r.name}: {r.not_delivered}"
        for name, side in (("baseline", base), ("candidate", cand))
        for r in side.runs
        if r.not_delivered
    ]
    return GateReport(
        base.describe(),
        cand.describe(),
        confidence,
        level,
        results,
        code,
        allowed or {},
        seed,
        resamples,
        notes,
    )
