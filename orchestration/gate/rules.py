"""The gate's rules: `METRIC:LIMIT` items such as `p99_ttft_ms:10%`, `error_rate:0.5pp`, `p99_ttft_ms:50ms`.

A limit is how much worse the candidate may be than the baseline before the rule fails: `N%` relative to the
baseline's value, `Npp` percentage points of a fraction (error_rate, validity_rate, prefix_cache_hit_rate), a
plain number (or `Nms` for a `_ms` metric) in the metric's own unit. Which way is worse comes from the metric's
name, as in `vllm-locust report` (orchestration.report.compare.direction); a metric with no better direction
(duration, chunk_token_ratio) fails on a change beyond the limit either way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestration.report.compare import direction as report_direction
from vllm_users import errors
from vllm_users.measure import metric_keys as K

__all__ = ["DEFAULT_RULES", "FRACTIONS", "Rule", "direction", "parse_rules"]

# The default gate: the TTFT tail and its median, decode speed, capacity and failures. p99 of a short run is
# noisy; its limit is wider than the medians' so that only a real tail regression gets past the interval.
DEFAULT_RULES = (
    "p99_ttft_ms:10%",
    "median_ttft_ms:10%",
    "median_tpot_ms:5%",
    "output_throughput:5%",
    "error_rate:0.5pp",
)
FRACTIONS = ("error_rate", K.VALIDITY_RATE, K.PREFIX_CACHE_HIT_RATE, "good_fraction")  # values in [0, 1]
_LIMIT = re.compile(r"^(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>%|pp|ms)?$")


@dataclass(frozen=True)
class Rule:
    """One rule: `metric` may be at most `limit` worse (unit '%': relative, 'pp': points, 'abs': metric units)."""

    metric: str
    limit: float
    unit: str  # "%" | "pp" | "abs"

    @property
    def text(self) -> str:
        """The rule as written on the command line (normalised): 'p99_ttft_ms:10%'."""
        unit = {"%": "%", "pp": "pp", "abs": "ms" if self.metric.endswith("_ms") else ""}[self.unit]
        return f"{self.metric}:{self.limit:g}{unit}"

    @property
    def worse(self) -> str:
        """'higher' or 'lower' (the direction that is a regression), or 'either' for a neutral metric."""
        better = direction(self.metric)
        return {"higher": "lower", "lower": "higher"}.get(better or "", "either")

    def describe(self) -> str:
        """'p99_ttft_ms may rise by at most 10%' and the like."""
        verb = {"higher": "rise", "lower": "fall", "either": "change"}[self.worse]
        unit = {"%": "%", "pp": " pp", "abs": " ms" if self.metric.endswith("_ms") else ""}[self.unit]
        return f"{self.metric} may {verb} by at most {self.limit:g}{unit}"


def direction(metric: str) -> str | None:
    """'higher' or 'lower' is better, or None: report's directions, and lower for the error rate."""
    if metric == "error_rate":
        return "lower"
    return report_direction(metric)


def _parse_one(item: str) -> Rule:
    metric, sep, limit = item.strip().rpartition(":")
    m = _LIMIT.match(limit.strip().lower())
    if not sep or not metric or m is None:
        raise errors.UsageError(
            f"--max-regression {item!r}: expected METRIC:LIMIT such as p99_ttft_ms:10%, "
            "error_rate:0.5pp or p99_ttft_ms:50ms"
        )
    unit = {"%": "%", "pp": "pp", "ms": "abs", None: "abs"}[m.group("unit")]
    if unit == "pp" and metric not in FRACTIONS:
        raise errors.UsageError(
            f"--max-regression {item!r}: pp (percentage points) is for fractions: "
            f"{', '.join(FRACTIONS)}; use % or an absolute limit"
        )
    if m.group("unit") == "ms" and not metric.endswith("_ms"):
        raise errors.UsageError(f"--max-regression {item!r}: ms limits are for *_ms metrics")
    return Rule(metric, float(m.group("num")), unit)


def parse_rules(items: Sequence[str] | None) -> list[Rule]:
    """The rules of --max-regression (None or empty: DEFAULT_RULES; the word `defaults` inserts them, and a
    later limit of the same metric replaces an earlier one); UsageError naming a malformed item."""
    texts: list[str] = []
    for item in items or ["defaults"]:
        for part in item.split():
            texts.extend(DEFAULT_RULES if part == "defaults" else [part])
    rules: dict[str, Rule] = {}
    for t in texts:
        r = _parse_one(t)
        rules.pop(r.metric, None)  # the later limit wins, in the later place
        rules[r.metric] = r
    return list(rules.values())
