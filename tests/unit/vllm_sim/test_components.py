"""Pure components: tokenizer, schema generator, request validation, KV blocks, faults, config."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest

from vllm_sim import tokenizer as tok
from vllm_sim.config import parse_config
from vllm_sim.faults import Fault, draw_fault, global_rates, parse_fault
from vllm_sim.kvcache import BlockManager, SeqBlocks, block_hashes
from vllm_sim.request import ApiError, build_plan, parse_request
from vllm_sim.schema_gen import generate

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 3, "maxLength": 10},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "kind": {"enum": ["a", "b", "c"]},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 2, "maxItems": 4},
        "nested": {"type": "object", "properties": {"x": {"$ref": "#/$defs/pos"}}, "required": ["x"]},
        "maybe": {"anyOf": [{"type": "null"}, {"type": "integer", "multipleOf": 5, "minimum": 3}]},
    },
    "required": ["name", "age", "score", "kind", "ok", "tags", "nested"],
    "$defs": {"pos": {"type": "integer", "minimum": 1}},
}


def test_tokenizer_counts_words_and_chat_overhead() -> None:
    assert tok.count_text("  hello   world\nagain ") == 3
    assert tok.encode_text("a b") == tok.encode_text("a  b")
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi x"}]},
    ]
    expected = tok.CHAT_TOKENS_BASE + 2 * tok.CHAT_TOKENS_PER_MESSAGE + 4
    assert tok.count_chat(msgs) == expected == len(tok.encode_chat(msgs))


def test_split_pieces_round_trips() -> None:
    text = json.dumps({"a": [1, 2.5, "x y"], "é": None})
    assert "".join(tok.split_pieces(text)) == text


@pytest.mark.parametrize("seed", range(30))
def test_schema_instances_are_valid(seed: int) -> None:
    inst = generate(SCHEMA, random.Random(seed))
    jsonschema.validate(inst, SCHEMA)


def test_schema_generation_is_deterministic() -> None:
    assert generate(SCHEMA, random.Random(5)) == generate(SCHEMA, random.Random(5))


def _req(body: dict, chat: bool = True, max_len: int = 100):
    return parse_request(json.dumps(body).encode(), chat, "m", max_len)


@pytest.mark.parametrize(
    "body,status",
    [
        ({"messages": "x"}, 400),
        ({}, 400),
        ({"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}}, 400),
    ],
)
def test_bad_requests_get_vllm_statuses(body: dict, status: int) -> None:
    with pytest.raises(ApiError) as ei:
        _req(body)
    assert ei.value.status == status
    err = json.loads(ei.value.body())["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status


def test_unknown_fields_ignored_and_defaults() -> None:
    r = _req({"messages": [{"role": "user", "content": "a b"}], "frobnicate": 1})
    assert r.max_tokens == 100 - r.prompt_tokens and not r.stream


def test_plan_lengths_eos_and_seed() -> None:
    base = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 20}
    r = _req({**base, "ignore_eos": True})
    assert build_plan(r, random.Random(1), 1.0).n_tokens == 20
    lens = {build_plan(_req(base), random.Random(i), 1.0).n_tokens for i in range(20)}
    assert min(lens) >= 1 and max(lens) <= 20 and len(lens) > 1
    r = _req({**base, "min_tokens": 15})
    assert all(build_plan(r, random.Random(i), 1.0).n_tokens >= 15 for i in range(20))
    a = build_plan(_req({**base, "seed": 3}), random.Random(1), 0.3)
    b = build_plan(_req({**base, "seed": 3}), random.Random(2), 0.3)
    assert a.pieces == b.pieces


def test_stop_string_cuts_output() -> None:
    r = _req(
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 50, "ignore_eos": True, "seed": 1}
    )
    full = "".join(build_plan(r, random.Random(0), 0.0).pieces)
    word = full.split()[5]
    r2 = _req(
        {
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 50,
            "ignore_eos": True,
            "seed": 1,
            "stop": [" " + word],
        }
    )
    plan = build_plan(r2, random.Random(0), 0.0)
    assert plan.finish_reason == "stop" and "".join(plan.pieces) == full[: full.index(" " + word)]


def test_tool_plan_arguments_valid() -> None:
    params = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"],
    }
    tools = [{"type": "function", "function": {"name": "weather", "parameters": params}}]
    for seed in range(10):
        r = _req(
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": tools,
                "tool_choice": "required",
                "seed": seed,
            }
        )
        plan = build_plan(r, random.Random(0), 0.3)
        assert plan.finish_reason == "tool_calls" and plan.tool_name == "weather"
        jsonschema.validate(json.loads("".join(plan.pieces)), params)
    r = _req({"messages": [{"role": "user", "content": "x"}], "tools": tools, "tool_choice": "none"})
    assert build_plan(r, random.Random(0), 0.3).tool_name is None
    with pytest.raises(ApiError):
        _req(
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": tools,
                "tool_choice": {"type": "function", "function": {"name": "nope"}},
            }
        )


def test_block_manager_prefix_hits_and_lru() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_caching=True)
    ids = list(range(17))
    a = SeqBlocks(block_hashes(ids, 4))
    assert len(a.hashes) == 4
    assert bm.allocate(a, 18) == 0 and a.n_blocks == 5
    bm.commit(a)
    bm.release(a)
    assert bm.usage() == 0.0
    b = SeqBlocks(block_hashes(ids, 4))
    assert bm.allocate(b, 18) == 16  # 4 full blocks cached
    bm.release(b)
    c = SeqBlocks(block_hashes(list(range(100, 132)), 4))
    assert bm.allocate(c, 32) == 0  # needs all 8 blocks: evicts the cached ones
    bm.release(c)
    d = SeqBlocks(block_hashes(ids, 4))
    assert bm.allocate(d, 18) == 0
    full = SeqBlocks([])
    assert bm.allocate(full, 100) is None


def test_block_manager_without_caching() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_caching=False)
    a = SeqBlocks(block_hashes(list(range(16)), 4))
    assert bm.allocate(a, 17) == 0
    bm.commit(a)
    bm.release(a)
    assert bm.allocate(SeqBlocks(block_hashes(list(range(16)), 4)), 17) == 0


def test_fault_parsing() -> None:
    assert parse_fault("stall:3:250") == Fault("stall", 3, 250.0)
    assert parse_fault("close:2") == Fault("close", 2)
    assert parse_fault("hang") == Fault("hang", 0)
    assert parse_fault("429") == Fault("429")
    for bad in ("nope", "stall:3", "close:x", "500:1", "delay_headers"):
        with pytest.raises(ValueError):
            parse_fault(bad)


def test_global_fault_rates_are_seeded() -> None:
    cfg = parse_config(["--fault-rate-500", "0.2", "--fault-rate-close", "0.1"], env={})
    rates = global_rates(cfg)
    draws = [draw_fault(cfg, rates, random.Random(9)) for _ in range(1)]
    again = [draw_fault(cfg, rates, random.Random(9)) for _ in range(1)]
    assert draws == again
    rng = random.Random(0)
    kinds = [f.kind if f else None for f in (draw_fault(cfg, rates, rng) for _ in range(5000))]
    assert 0.17 < kinds.count("500") / 5000 < 0.23 and 0.07 < kinds.count("close") / 5000 < 0.13


def test_config_env_and_flags() -> None:
    cfg = parse_config(
        [],
        env={
            "VLLM_LOCUST_SIM_MAX_NUM_SEQS": "7",
            "VLLM_LOCUST_SIM_FIXED": "1",
            "VLLM_LOCUST_SIM_ENABLE_PREFIX_CACHING": "false",
        },
    )
    assert cfg.max_num_seqs == 7 and cfg.fixed and not cfg.enable_prefix_caching
    cfg = parse_config(["--max-num-seqs", "3", "--no-enable-prefix-caching"], env={})
    assert cfg.max_num_seqs == 3 and not cfg.enable_prefix_caching
    with pytest.raises(SystemExit):
        parse_config(["--block-size", "0"], env={})


def test_one_seed_gives_a_spread_of_lengths_over_prompts() -> None:
    """A seeded run's answers: the same request answers alike, different prompts under one seed do not all
    get one length (from the body's seed alone, all 60 answers of `--seed 5` were 128 tokens)."""
    lens = []
    for i in range(40):
        body = {"messages": [{"role": "user", "content": f"prompt number {i}"}], "max_tokens": 64, "seed": 5}
        a = build_plan(_req(body), random.Random(1), 0.5)
        assert build_plan(_req(body), random.Random(2), 0.5).pieces == a.pieces
        lens.append(a.n_tokens)
    assert len(set(lens)) > 5, lens
