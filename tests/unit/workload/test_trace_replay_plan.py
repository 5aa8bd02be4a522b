"""The trace's schedule (entries, sessions, worker shares, time scale) and its prompts (exact lengths, mooncake
blocks shared by hash id)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from vllm_users.errors import TraceError
from vllm_users.options import Options, build
from vllm_users.workload.prompts import LengthModel
from vllm_users.workload.trace import Trace, TraceRequest
from vllm_users.workload.trace_prompts import TracePrompts
from vllm_users.workload.trace_schedule import build_plan, check_trace, plan_of, worker_trace_iter


def _trace() -> Trace:
    R = TraceRequest
    reqs = [
        R(0.0, 10),
        R(0.5, 10, session_id="a", turn=0),
        R(1.0, 10),
        R(1.5, 10, session_id="a", turn=1),
        R(2.0, 10, session_id="b", turn=0),
        R(2.5, 10),
        R(3.0, 10, session_id="b", turn=1),
        R(3.5, 10, session_id="a", turn=2),
    ]
    return Trace("t.jsonl", "jsonl", reqs)


def test_entries_are_requests_outside_sessions_and_first_turns() -> None:
    plan = build_plan(_trace())
    assert plan.entries == [(0, 0.0), (1, 0.5), (2, 1.0), (4, 2.0), (5, 2.5)]
    assert [r.turn for r in plan.sessions[1]] == [0, 1, 2]
    assert [r.offset_s for r in plan.sessions[4]] == [2.0, 3.0]
    assert plan.requests_of(2) == [plan.trace.requests[2]]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_workers_split_the_entries_by_index_and_keep_the_global_times(count: int) -> None:
    plan = build_plan(_trace())
    shares = [list(worker_trace_iter(plan, 2.0, w, count)) for w in range(count)]
    for w, share in enumerate(shares):
        assert all(i % count == w for i, _ in share)
    merged = sorted(x for share in shares for x in share)
    assert merged == [(i, off / 2.0) for i, off in plan.entries]  # every entry once, at offset / time scale


def test_a_trace_is_an_open_loop_run() -> None:
    assert build(trace="t.jsonl").open_loop and not Options().open_loop


def test_a_bad_split_or_scale_is_refused() -> None:
    plan = build_plan(_trace())
    with pytest.raises(ValueError):
        list(worker_trace_iter(plan, 1.0, 2, 2))
    with pytest.raises(ValueError):
        list(worker_trace_iter(plan, 0.0, 0, 1))


def _mooncake(tmp_path: Path, rows: list[dict]) -> str:
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def test_check_trace_reads_the_window_and_refuses_an_empty_one(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 1000 * i, "input_length": 100, "output_length": 5, "hash_ids": [i]} for i in range(5)
    ]
    path = _mooncake(tmp_path, rows)
    line = check_trace(build(trace=path, trace_start=1.0, trace_duration=2.5).trace, "chat", None)
    assert "3 requests" in line and "mooncake" in line
    assert len(plan_of(build(trace=path).trace, 2).entries) == 2  # --num-prompts caps the trace
    with pytest.raises(TraceError, match="no requests"):
        check_trace(build(trace=path, trace_start=10.0).trace, "chat", None)


# ----- prompts -----
def _bpe_like(text: str) -> int:
    """A counter whose words count differently alone and after a space (like BPE's leading-space tokens):
    alone ceil(len/3), after a space ceil((len+1)/3)."""
    words = text.split(" ")
    return math.ceil(len(words[0]) / 3) + sum(math.ceil((len(w) + 1) / 3) for w in words[1:])


@pytest.fixture(scope="module")
def lengths() -> LengthModel:
    lm = LengthModel.from_counter(_bpe_like)
    assert lm.exact
    return lm


def test_a_block_is_exactly_block_size_tokens_at_the_start_and_after_another(lengths: LengthModel) -> None:
    tp = TracePrompts(lengths, block_size=64, seed=3)
    for h in range(20):
        alone = tp.blocks_text((h,), None, 0)
        assert _bpe_like(alone) == 64
        assert _bpe_like(tp.blocks_text((h + 100, h), None, 0)) == 128  # the same block after another


@pytest.mark.parametrize("tokens", [1, 63, 64, 65, 150, 191, 192, 300])
def test_a_mooncake_prompt_is_cut_to_its_input_length_exactly(lengths: LengthModel, tokens: int) -> None:
    tp = TracePrompts(lengths, block_size=64)
    text = tp.text(TraceRequest(0.0, tokens, 5, hash_ids=(7, 8, 9)), index=4)
    assert _bpe_like(text) == tokens  # 300: past the three blocks, random text fills the rest


def test_equal_hash_ids_give_equal_token_blocks(lengths: LengthModel) -> None:
    tp = TracePrompts(lengths, block_size=32, seed=1)
    a = tp.text(TraceRequest(0.0, 96, hash_ids=(1, 2, 3)), 0)
    b = tp.text(TraceRequest(0.0, 96, hash_ids=(1, 2, 4)), 1)
    c = tp.text(TraceRequest(0.0, 96, hash_ids=(5, 2, 3)), 2)
    two = tp.blocks_text((1, 2), None, 0)
    assert a.startswith(two + " ") and b.startswith(two + " ") and a != b
    assert not c.startswith(tp.blocks_text((1,), None, 0))
    # a fresh maker (another worker) builds the same blocks from the same ids and seed
    assert (
        TracePrompts(lengths, block_size=32, seed=1).text(TraceRequest(0.0, 96, hash_ids=(1, 2, 3)), 9) == a
    )
    assert (
        TracePrompts(lengths, block_size=32, seed=2).text(TraceRequest(0.0, 96, hash_ids=(1, 2, 3)), 0) != a
    )


def test_plain_lengths_and_given_prompts(lengths: LengthModel) -> None:
    tp = TracePrompts(lengths, block_size=64)
    assert _bpe_like(tp.text(TraceRequest(0.0, 77), 3)) == 77
    assert tp.text(TraceRequest(0.0, 77), 3) == tp.text(TraceRequest(0.0, 77), 3)
    given = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert tp.messages(TraceRequest(0.0, messages=given), 0, [{"role": "user", "content": "old"}]) == given
    hist = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert tp.messages(TraceRequest(0.0, prompt="next"), 0, hist) == [
        *hist,
        {"role": "user", "content": "next"},
    ]


def test_the_ratio_model_gives_about_the_length() -> None:
    tp = TracePrompts(LengthModel(tokens_per_word=1.0), block_size=50)
    text = tp.text(TraceRequest(0.0, 120, hash_ids=(1, 2)), 0)
    assert len(text.split()) == 120
    assert text.startswith(tp.block(1)[0])
