"""``--replicas N``: N batching engines behind one port, like N vLLM servers behind a load balancer.

Each replica is a whole ``BatchingEngine`` (its own ``--max-num-seqs``, KV cache and prefix cache) with its own
statistics: its engine's (queue, KV, prefix cache) and its streams' (TTFT, ITL, tokens, finished requests). ``sync``
adds the replicas' numbers to the server's own (responses refused before any engine) into the statistics /metrics
and /sim/stats render, so a scrape sees one server whose gauges and counters are the sums (KV-cache usage: the mean,
it is a fraction); ``/metrics?replica=N`` renders one replica's alone, under the same names.

The router picks a replica when a request arrives: round-robin, least-loaded (fewest in flight: running + waiting),
random (seeded), or prefix. Prefix routing scores each replica by the longest run of the prompt's leading KV blocks
it holds, as llm-d's prefix-cache scorer does: the blocks its engine has cached, and the blocks of the prompts the
router already sent it (still in prefill, not cached yet, but they will be by the time a follower is scheduled),
remembered LRU up to the replica's KV capacity. Ties (a new prefix, or several holding it) go to the least loaded.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict

from .config import SimConfig
from .engine import BatchingEngine, MoeRouter
from .kvcache import block_hashes
from .metrics import FastHistogram, SimStats
from .request import SimRequest
from .stream import Stream

__all__ = ["REPLICA_HEADER", "ReplicaSet", "merge_stats"]

REPLICA_HEADER = "x-sim-replica"  # every response an engine of several served names its replica here

_SUMMED = (
    "running",
    "waiting",
    "prefix_queries",
    "prefix_hits",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "served",
    "generate_requests",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted",
)
_HISTOGRAMS = ("ttft", "itl", "e2e", "queue", "lateness")
_BY_KEY = ("success", "by_status", "faults")
_BY_INDEX = ("expert_tokens", "spec_accepted_per_pos")


class _AllBlocks:
    """The replicas' block managers seen as one (what /reset_prefix_cache needs)."""

    def __init__(self, engines: list[BatchingEngine]) -> None:
        self.engines = engines

    def reset_prefix_cache(self) -> bool:
        """Reset every replica's prefix cache; False when any one refused (blocks held by running requests)."""
        results = [e.bm.reset_prefix_cache() for e in self.engines]
        return all(results)


class ReplicaSet:
    """N engines and the router in front of them."""

    def __init__(self, cfg: SimConfig, stats: SimStats, own: SimStats | None = None) -> None:
        self.stats = stats  # what /metrics renders: the sum
        self.own = own  # the server's own counters (responses refused before an engine), part of the sum
        self.policy = cfg.replica_policy
        self.block_size = cfg.block_size
        self.replica_stats = [
            SimStats(cfg.model, cfg.num_experts, cfg.spec_tokens) for _ in range(cfg.replicas)
        ]
        self.engines = [BatchingEngine(cfg, st, MoeRouter(cfg, st)) for st in self.replica_stats]
        self.bm = _AllBlocks(self.engines)
        self._next = itertools.cycle(range(cfg.replicas))
        self.rng = random.Random(cfg.seed + 13)
        self.routed: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(cfg.replicas)]
        self.routed_cap = max(1, cfg.kv_cache_tokens // cfg.block_size)
        self.submitted = [0] * cfg.replicas

    def _loads(self) -> list[int]:
        return [len(e.running) + len(e.waiting) for e in self.engines]

    def _least_loaded(self, among: list[int]) -> int:
        loads = self._loads()
        return min(among, key=lambda i: (loads[i], i))  # ties: the lowest index, deterministic

    def pick(self, req: SimRequest | None = None) -> int:
        """The replica the next request (``req``: its prompt, for prefix routing) goes to."""
        if self.policy == "least-loaded":
            return self._least_loaded(list(range(len(self.engines))))
        if self.policy == "random":
            return self.rng.randrange(len(self.engines))
        if self.policy == "prefix" and req is not None:
            return self._by_prefix(block_hashes(req.prompt_ids, self.block_size))
        return next(self._next)

    def prefix_blocks(self, i: int, hashes: list[int]) -> int:
        """Leading blocks of a prompt that replica ``i`` holds (cached, or routed to it and remembered)."""
        cached = self.engines[i].bm.refs
        seen = self.routed[i]
        n = 0
        for h in hashes:
            if h not in seen and h not in cached:
                break
            n += 1
        return n

    def _by_prefix(self, hashes: list[int]) -> int:
        """The replica holding the longest prefix of ``hashes`` (ties: least loaded); remember it holds them now."""
        scores = [self.prefix_blocks(i, hashes) for i in range(len(self.engines))]
        best = max(scores)
        i = self._least_loaded([j for j, s in enumerate(scores) if s == best])
        seen = self.routed[i]
        for h in hashes:
            seen[h] = None
            seen.move_to_end(h)
        while len(seen) > self.routed_cap:
            seen.popitem(last=False)
        return i

    def submit(self, s: Stream) -> None:
        """Hand a request to its replica (picked on arrival; picked now when it has none)."""
        i = s.replica if s.replica >= 0 else self.pick(s.req)
        s.replica = i
        self.submitted[i] += 1
        self.engines[i].submit(s)

    def stall_all(self, seconds: float) -> None:
        """Control: every replica stalls."""
        for e in self.engines:
            e.stall_all(seconds)

    def sync(self) -> None:
        """The server's own statistics plus every replica's, into the ones rendered (called before rendering)."""
        parts = self.replica_stats + ([self.own] if self.own is not None else [])
        merge_stats(self.stats, parts)
        self.stats.kv_usage = sum(p.kv_usage for p in self.replica_stats) / len(self.replica_stats)


def merge_stats(dst: SimStats, parts: list[SimStats]) -> None:
    """Set ``dst``'s counters, gauges and histograms to the sums of ``parts``'."""
    for name in _SUMMED:
        setattr(dst, name, sum(getattr(p, name) for p in parts))
    for name in _HISTOGRAMS:
        setattr(dst, name, _merged([getattr(p, name) for p in parts]))
    for name in _BY_KEY:
        out = getattr(dst, name)
        out.clear()
        for p in parts:
            for k, v in getattr(p, name).items():
                out[k] += v
    for name in _BY_INDEX:
        if getattr(dst, name):
            setattr(dst, name, [sum(col) for col in zip(*(getattr(p, name) for p in parts), strict=True)])


def _merged(hists: list[FastHistogram]) -> FastHistogram:
    """One histogram holding every observation of ``hists`` (same bounds)."""
    out = FastHistogram(hists[0].bounds)
    for h in hists:
        out.counts = [a + b for a, b in zip(out.counts, h.counts, strict=True)]
        out.sum += h.sum
        out.count += h.count
        out.max = max(out.max, h.max)
    return out
