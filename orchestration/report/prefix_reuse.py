"""What prefix-cache hit rate a run's workload allows: the ceiling a measured hit rate is judged against.

A hit rate is only low against what the prompts could share. Random prompts share nothing (a 0 % hit rate is
all there is to get); a mooncake trace's hash ids say exactly how much of it repeats (`replay`'s
`expected_block_reuse`, the figure the summary prints as "Block reuse (trace)"); `--prefix-len` with
`--cache-rate` puts a known share of shared tokens in front of each prompt. Multi-turn conversations resend their
history, but how much of each prompt that is depends on the answers: reuse is expected, its ceiling unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.measure.server_counters import RANDOM_PROMPT_SCENARIOS


@dataclass(frozen=True)
class ReuseCeiling:
    """The workload's prefix reuse: `ceiling` (a fraction of prompt tokens) when known; `expected` whether any is."""

    expected: bool | None  # True: prompts share a prefix; False: they share none; None: cannot tell
    ceiling: float | None  # the hit rate an unbounded cache would reach, when the workload says
    basis: str  # where the ceiling (or the expectation) comes from, for the finding's evidence


def _mean_prompt_tokens(res: dict[str, Any]) -> float | None:
    total, done = res.get(K.TOTAL_INPUT_TOKENS), res.get(K.COMPLETED)
    if isinstance(total, int | float) and total > 0 and isinstance(done, int) and done > 0:
        return float(total) / done
    return None


def _shared_prefix(res: dict[str, Any], meta: dict[str, Any]) -> ReuseCeiling | None:
    """--prefix-len P, --cache-rate c, --num-prefixes K over N requests of a mean prompt of L tokens: c * P / L,
    less the first request of each prefix (a miss that publishes it)."""
    p, rate, k = meta.get("prefix_len"), meta.get("cache_rate"), meta.get("num_prefixes") or 1
    if not p:
        return None
    if not rate:
        return ReuseCeiling(False, 0.0, f"--prefix-len {p} with --cache-rate 0: every prefix is unique")
    prompt, n = _mean_prompt_tokens(res), res.get(K.COMPLETED) or 0
    if prompt is None or not n:
        return ReuseCeiling(True, None, f"--prefix-len {p} --cache-rate {rate:g}")
    first_seen = min(1.0, k / max(1.0, rate * n))
    ceiling = max(0.0, min(1.0, rate * p / prompt) * (1.0 - first_seen))
    return ReuseCeiling(
        True,
        ceiling,
        f"--prefix-len {p} --cache-rate {rate:g} --num-prefixes {k} of a mean prompt of {prompt:.0f} tokens",
    )


def reuse_ceiling(res: dict[str, Any]) -> ReuseCeiling:
    """What the run's prompts allow the prefix cache to hit, from its result (meta, replay, scenarios)."""
    meta = res.get("meta") or {}
    replay = res.get("replay") or {}
    if replay.get("expected_block_reuse") is not None:
        return ReuseCeiling(
            True,
            float(replay["expected_block_reuse"]),
            "the trace's block reuse (its hash ids, unbounded cache)",
        )
    if replay:  # a trace without hash ids: its prompts' sharing is unknown
        return ReuseCeiling(None, None, "a trace without hash ids")
    scenarios = set(res.get("per_scenario") or {})
    if res.get("ttft_by_turn") or "multi-turn" in scenarios:
        return ReuseCeiling(True, None, "multi-turn conversations resend their history")
    prefix = _shared_prefix(res, meta)
    if prefix is not None and prefix.expected:
        return prefix
    if meta.get("dataset"):
        return ReuseCeiling(None, None, "a dataset's prompts")
    if scenarios and scenarios <= RANDOM_PROMPT_SCENARIOS:
        return prefix or ReuseCeiling(False, 0.0, "random prompts share no prefix")
    return ReuseCeiling(None, None, "scenarios " + ", ".join(sorted(scenarios)) if scenarios else "unknown")
