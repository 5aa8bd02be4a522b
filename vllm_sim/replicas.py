"""``--replicas N``: N batching engines behind one port, like N vLLM servers behind a load balancer.

Each replica is a whole ``BatchingEngine`` (its own ``--max-num-seqs``, KV cache and prefix cache) with its own
engine-side statistics; the streams' statistics (TTFT, ITL, tokens) stay the server's. ``sync`` sums the
replicas' engine-side numbers into the server's ``SimStats`` before /metrics or /sim/stats are rendered, so a
scrape sees one server whose gauges and counters are the sums (KV-cache usage: the mean, it is a fraction).
"""

from __future__ import annotations

import itertools

from .config import SimConfig
from .engine import BatchingEngine, MoeRouter
from .metrics import FastHistogram, SimStats
from .stream import Stream

__all__ = ["ReplicaSet"]


class _AllBlocks:
    """The replicas' block managers seen as one (what /reset_prefix_cache needs)."""

    def __init__(self, engines: list[BatchingEngine]) -> None:
        self.engines = engines

    def reset_prefix_cache(self) -> bool:
        """Reset every replica's prefix cache; False when any one refused (blocks held by running requests)."""
        results = [e.bm.reset_prefix_cache() for e in self.engines]
        return all(results)


class ReplicaSet:
    """N engines, one submit: requests go round-robin or to the least-loaded replica (fewest running + waiting)."""

    def __init__(self, cfg: SimConfig, stats: SimStats) -> None:
        self.stats = stats
        self.policy = cfg.replica_policy
        self.replica_stats = [SimStats(cfg.model, cfg.num_experts) for _ in range(cfg.replicas)]
        self.engines = [BatchingEngine(cfg, st, MoeRouter(cfg, st)) for st in self.replica_stats]
        self.bm = _AllBlocks(self.engines)
        self._next = itertools.cycle(range(cfg.replicas))
        self.submitted = [0] * cfg.replicas

    def pick(self) -> int:
        """The replica the next request goes to."""
        if self.policy == "least-loaded":
            loads = [len(e.running) + len(e.waiting) for e in self.engines]
            return loads.index(min(loads))  # ties: the lowest index, deterministic
        return next(self._next)

    def submit(self, s: Stream) -> None:
        """Hand a request to one replica."""
        i = self.pick()
        self.submitted[i] += 1
        self.engines[i].submit(s)

    def stall_all(self, seconds: float) -> None:
        """Control: every replica stalls."""
        for e in self.engines:
            e.stall_all(seconds)

    def sync(self) -> None:
        """Sum the replicas' engine-side statistics into the server's (called before rendering them)."""
        st, parts = self.stats, self.replica_stats
        st.running = sum(p.running for p in parts)
        st.waiting = sum(p.waiting for p in parts)
        st.kv_usage = sum(p.kv_usage for p in parts) / len(parts)
        st.preemptions = sum(p.preemptions for p in parts)
        st.prefix_queries = sum(p.prefix_queries for p in parts)
        st.prefix_hits = sum(p.prefix_hits for p in parts)
        st.prompt_tokens = sum(p.prompt_tokens for p in parts)
        st.queue = _merged([p.queue for p in parts])
        st.lateness = _merged([p.lateness for p in parts])
        if st.expert_tokens:
            st.expert_tokens = [sum(col) for col in zip(*(p.expert_tokens for p in parts), strict=True)]


def _merged(hists: list[FastHistogram]) -> FastHistogram:
    """One histogram holding every observation of ``hists`` (same bounds)."""
    out = FastHistogram(hists[0].bounds)
    for h in hists:
        out.counts = [a + b for a, b in zip(out.counts, h.counts, strict=True)]
        out.sum += h.sum
        out.count += h.count
        out.max = max(out.max, h.max)
    return out
