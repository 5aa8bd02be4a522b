"""Shared system prompts for prefix-caching workloads: --prefix-len tokens, --cache-rate, --num-prefixes."""

from __future__ import annotations

import random
from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.option_spec import BOTH, opt
from vllm_users.workload.prompts import LengthModel

_PHI = 0.6180339887498949  # low-discrepancy sequence: any run of keys gets close to the asked fraction


@dataclass(frozen=True)
class PrefixOptions:
    """Shared system prompts (prefix caching): how long, how often, how many distinct ones."""

    prefix_len: int = opt(0, T.nonneg_int, "Shared system-prompt tokens (prefix caching)", *BOTH)
    cache_rate: float = opt(0.0, T.fraction, "Fraction of requests that start with a shared prefix", *BOTH)
    num_prefixes: int = opt(1, T.pos_int, "How many distinct shared prefixes (K)", *BOTH)


class SharedPrefixes:
    """Decides, per conversation key, a system prompt: one of K shared texts or a unique one."""

    def __init__(
        self,
        prefix_len: int,
        cache_rate: float,
        num_prefixes: int,
        seed: int,
        lengths: LengthModel | None = None,
    ) -> None:
        self.prefix_len = prefix_len
        self.cache_rate = cache_rate
        self.num_prefixes = max(1, num_prefixes)
        self.seed = seed
        self.lengths = lengths or LengthModel()
        self._shared: dict[int, str] = {}

    @property
    def enabled(self) -> bool:
        """True when requests get a system prompt at all (--prefix-len > 0)."""
        return self.prefix_len > 0

    def is_shared(self, key: int) -> bool:
        """Whether conversation `key` starts with a shared prefix (fraction --cache-rate over keys)."""
        return ((key + 1 + self.seed) * _PHI) % 1.0 < self.cache_rate

    def shared_index(self, key: int) -> int:
        """Which of the K shared prefixes conversation `key` uses."""
        return random.Random(f"prefix-pick:{self.seed}:{key}").randrange(self.num_prefixes)

    def text(self, key: int) -> str | None:
        """The system prompt of conversation `key` (None when --prefix-len is 0)."""
        if not self.enabled:
            return None
        if self.is_shared(key):
            k = self.shared_index(key)
            if k not in self._shared:
                rng = random.Random(f"prefix-shared:{self.seed}:{k}")
                self._shared[k] = self.lengths.text(self.prefix_len, rng)
            return self._shared[k]
        return self.lengths.text(self.prefix_len, random.Random(f"prefix-unique:{self.seed}:{key}"))


def from_options(o: PrefixOptions, seed: int, lengths: LengthModel | None) -> SharedPrefixes:
    """SharedPrefixes from --prefix-len, --cache-rate, --num-prefixes and --seed."""
    return SharedPrefixes(o.prefix_len, o.cache_rate, o.num_prefixes, seed, lengths)
