"""Fault injection: per request through ``X-Sim-Fault: kind[:arg[:arg]]`` or as global rates.

Kinds: ``500``, ``429`` (Retry-After: 1), ``stall:K:MS``, ``close:K``, ``torn:K``, ``inband_error:K``,
``reset:K``, ``delay_headers:MS``, ``usage_only``, ``zero_tokens``, ``hang:K``. Server quirks (every request,
``apply_quirks``): ``--ignore-max-tokens N``, ``--constant-prompt-tokens N``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import SimConfig

if TYPE_CHECKING:
    from .request import SimRequest

HEADER = "x-sim-fault"
# faults that strike after K tokens of the stream
MID_STREAM = frozenset({"stall", "close", "torn", "inband_error", "reset", "hang"})
KINDS = frozenset({"500", "429", "delay_headers", "usage_only", "zero_tokens"}) | MID_STREAM


@dataclass(frozen=True)
class Fault:
    """One fault to inject: its kind, the token count it strikes after, and a duration."""

    kind: str
    after: int = 0
    ms: float = 0.0


def parse_fault(value: str) -> Fault:
    """Parse an ``X-Sim-Fault`` header value; ValueError when malformed."""
    parts = value.strip().split(":")
    kind = parts[0].strip().lower()
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; known: {sorted(KINDS)}")
    args = [p.strip() for p in parts[1:]]
    if kind == "stall":
        if len(args) != 2:
            raise ValueError("stall needs stall:K:MS")
        return Fault(kind, int(args[0]), float(args[1]))
    if kind == "delay_headers":
        if len(args) != 1:
            raise ValueError("delay_headers needs delay_headers:MS")
        return Fault(kind, 0, float(args[0]))
    if kind in MID_STREAM:
        if len(args) > 1:
            raise ValueError(f"{kind} takes {kind}:K")
        k = int(args[0]) if args else 0
        if k < 0:
            raise ValueError("K must be >= 0")
        return Fault(kind, k)
    if args:
        raise ValueError(f"{kind} takes no argument")
    return Fault(kind)


def global_rates(cfg: SimConfig) -> list[tuple[str, float]]:
    """The configured global fault rates, in a fixed order (so the seeded draw is reproducible)."""
    return [
        (k, r)
        for k, r in (
            ("500", cfg.fault_rate_500),
            ("429", cfg.fault_rate_429),
            ("close", cfg.fault_rate_close),
            ("torn", cfg.fault_rate_torn),
            ("reset", cfg.fault_rate_reset),
            ("stall", cfg.fault_rate_stall),
            ("inband_error", cfg.fault_rate_inband_error),
            ("delay_headers", cfg.fault_rate_delay_headers),
        )
        if r > 0
    ]


def draw_fault(cfg: SimConfig, rates: list[tuple[str, float]], rng: random.Random) -> Fault | None:
    """Draw at most one fault for a request from the global rates (one seeded RNG draw)."""
    if not rates:
        return None
    x = rng.random()
    for kind, rate in rates:
        if x < rate:
            if kind == "stall":
                return Fault(kind, cfg.fault_after_tokens, cfg.fault_stall_ms)
            if kind == "delay_headers":
                return Fault(kind, 0, cfg.fault_delay_ms)
            return Fault(kind, cfg.fault_after_tokens if kind in MID_STREAM else 0)
        x -= rate
    return None


def apply_quirks(cfg: SimConfig, req: SimRequest) -> None:
    """Servers seen in the wild: one that ignores max_tokens (every answer N tokens, finish_reason "length"),
    one whose usage.prompt_tokens is always N (the prompt is counted, and prefilled, as its first N tokens)."""
    if cfg.ignore_max_tokens:
        req.max_tokens, req.min_tokens, req.ignore_eos = cfg.ignore_max_tokens, 0, True
    n = cfg.constant_prompt_tokens
    if n and req.prompt_ids:
        ids = req.prompt_ids
        req.prompt_ids = (ids * (n // len(ids) + 1))[:n]
