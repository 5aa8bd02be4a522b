"""Model mixes: `--model base:3,adapter-a:1,adapter-b:1` sends each request to one of several served names
(a base model and its LoRA adapters), by weight, drawn per ticket so a seed gives the same mix every run.

A plain `--model NAME` (no `:`, no `,`) is no mix: one name, weight 1. The first name of a mix is its base: the
model the preflight streams to and the calibration measures.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate

__all__ = ["ModelMix", "draw_unit", "model_names", "parse_mix"]


def draw_unit(seed: int, index: int, salt: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, index, salt): the same ticket draws the same value on every
    worker and every run (a hash, not a shared generator: tickets are taken in any order across workers)."""
    h = hashlib.blake2b(f"{salt}:{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


@dataclass(frozen=True)
class ModelMix:
    """Served names with their weights (a plain --model is one name of weight 1)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]

    @property
    def base(self) -> str:
        """The first name: the one the preflight checks streaming on and the calibration measures."""
        return self.names[0]

    @property
    def is_mix(self) -> bool:
        """True when requests go to more than one name."""
        return len(self.names) > 1

    def draw(self, seed: int, index: int) -> str:
        """The name ticket `index` goes to (by weight; deterministic for a seed)."""
        if len(self.names) == 1:
            return self.names[0]
        cum = list(accumulate(self.weights))
        u = draw_unit(seed, index, "model") * cum[-1]
        return self.names[min(bisect_right(cum, u), len(self.names) - 1)]


def parse_mix(text: str) -> ModelMix | None:
    """`base:3,a:1` (or one plain name) -> ModelMix; None for ""; ValueError naming the bad item.

    A name may itself hold a `:` (`org/model:tag`): only a last `:NUMBER` is a weight."""
    text = text.strip()
    if not text:
        return None
    names: list[str] = []
    weights: list[float] = []
    for item in text.split(","):
        item = item.strip()
        name, sep, w = item.rpartition(":")
        weight = 1.0
        if sep:
            try:
                weight = float(w)
            except ValueError:
                name, weight = item, 1.0  # `:tag`, not a weight
        else:
            name = item
        if not name:
            raise ValueError(f"--model {text!r}: empty model name in {item!r}")
        if not weight > 0 or weight == float("inf"):
            raise ValueError(f"--model {text!r}: weight of {name!r} must be a number > 0")
        if name in names:
            raise ValueError(f"--model {text!r}: {name!r} is named twice")
        names.append(name)
        weights.append(weight)
    return ModelMix(tuple(names), tuple(weights))


def model_names(text: str) -> tuple[str, ...]:
    """Every served name `--model` text sends to (none for "")."""
    mix = parse_mix(text)
    return mix.names if mix is not None else ()
