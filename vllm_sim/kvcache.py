"""KV-cache block accounting with vLLM-style prefix caching (hash chain of full blocks, LRU eviction)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Hash chain over the full blocks of a prompt: block i's hash covers blocks 0..i."""
    out = []
    prev = 0
    for i in range(0, len(token_ids) - block_size + 1, block_size):
        prev = hash((prev, tuple(token_ids[i : i + block_size])))
        out.append(prev)
    return out


class SeqBlocks:
    """The blocks one sequence holds: shared cached blocks (by hash) and private ones (a count)."""

    __slots__ = ("hashes", "held", "private")

    def __init__(self, hashes: list[int]) -> None:
        self.hashes = hashes
        self.held: list[int] = []
        self.private = 0

    @property
    def n_blocks(self) -> int:
        """Blocks held in all."""
        return len(self.held) + self.private


class BlockManager:
    """Counts blocks; ``total = free + private blocks of all sequences + len(cached)``."""

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool) -> None:
        self.total = num_blocks
        self.block_size = block_size
        self.caching = enable_caching
        self.free = num_blocks
        self.refs: dict[int, int] = {}  # hash -> sequences using it (cached blocks)
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached hashes with refcount 0, LRU first

    def available(self) -> int:
        """Blocks that can be handed out (free or evictable)."""
        return self.free + len(self.evictable)

    def usage(self) -> float:
        """Fraction of blocks in use by running sequences (evictable cached blocks count as free, like vLLM)."""
        return 1.0 - self.available() / self.total if self.total else 0.0

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def _take(self, n: int) -> None:
        """Hand out n blocks: free ones first, then evict least recently used cached blocks."""
        from_free = min(n, self.free)
        self.free -= from_free
        for _ in range(n - from_free):
            h, _ = self.evictable.popitem(last=False)
            del self.refs[h]

    def allocate(self, seq: SeqBlocks, tokens: int) -> int | None:
        """Allocate blocks for the first ``tokens`` tokens; return the cached-token count, None if full."""
        hits = 0
        if self.caching:
            for h in seq.hashes:
                if h not in self.refs:
                    break
                hits += 1
            # never count the whole prompt as cached: the last token must be computed to sample
            while hits and hits * self.block_size >= tokens:
                hits -= 1
        need = self.blocks_for(tokens) - hits
        hit_evictable = sum(1 for h in seq.hashes[:hits] if h in self.evictable)
        if need > self.available() - hit_evictable:
            return None
        for h in seq.hashes[:hits]:
            if self.refs[h] == 0:
                del self.evictable[h]
            self.refs[h] += 1
        seq.held = list(seq.hashes[:hits])
        self._take(need)
        seq.private = need
        return hits * self.block_size

    def grow(self, seq: SeqBlocks) -> bool:
        """One more block for a decoding sequence; False when none is available."""
        if self.available() < 1:
            return False
        self._take(1)
        seq.private += 1
        return True

    def commit(self, seq: SeqBlocks) -> None:
        """After prefill: publish the sequence's full prompt blocks in the prefix cache."""
        if not self.caching:
            return
        for h in seq.hashes[len(seq.held) :]:
            if seq.private == 0:
                break
            if h in self.refs:
                continue  # computed concurrently by another sequence: keep ours private
            self.refs[h] = 1
            seq.held.append(h)
            seq.private -= 1

    def release(self, seq: SeqBlocks) -> None:
        """Return a sequence's blocks; its cached ones become evictable (most recently used last)."""
        for h in seq.held:
            r = self.refs.get(h)
            if r is None:
                continue
            if r <= 1:
                self.refs[h] = 0
                self.evictable[h] = None
                self.evictable.move_to_end(h)
            else:
                self.refs[h] = r - 1
        self.free += seq.private
        seq.held = []
        seq.private = 0

    def reset_prefix_cache(self) -> bool:
        """vLLM's reset: forget every cached block; False (nothing forgotten) while a sequence holds any block."""
        if self.available() < self.total:
            return False  # vLLM 0.32 BlockPool.reset_prefix_cache: fails while blocks are not freed
        self.free += len(self.evictable)
        self.evictable.clear()
        self.refs.clear()
        return True
