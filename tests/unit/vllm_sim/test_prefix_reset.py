"""The simulator's prefix cache can be reset like vLLM's (POST /reset_prefix_cache): cached blocks no running
sequence holds are forgotten; while a sequence holds blocks the reset fails (vLLM: `{"success": false}`)."""

from __future__ import annotations

from vllm_sim.kvcache import BlockManager, SeqBlocks, block_hashes


def test_reset_forgets_the_cached_blocks() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_caching=True)
    ids = list(range(17))
    a = SeqBlocks(block_hashes(ids, 4))
    assert bm.allocate(a, 18) == 0
    bm.commit(a)
    bm.release(a)
    assert bm.reset_prefix_cache()
    assert bm.free == bm.total and not bm.refs and not bm.evictable
    assert bm.allocate(SeqBlocks(block_hashes(ids, 4)), 18) == 0  # the same prompt: no hit any more


def test_reset_fails_while_blocks_are_held() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_caching=True)
    a = SeqBlocks(block_hashes(list(range(17)), 4))
    bm.allocate(a, 18)
    bm.commit(a)
    assert not bm.reset_prefix_cache()  # a running sequence holds them
    bm.release(a)
    assert bm.reset_prefix_cache()
