"""The simulator's pooling APIs and the Responses API: token counts, shapes, errors."""

from __future__ import annotations

import json

import pytest

from vllm_sim import tokenizer as tok
from vllm_sim.config import SimConfig
from vllm_sim.pooling import answer, pooling_delay_s
from vllm_sim.request import ApiError
from vllm_sim.responses import as_chat_body


def test_embeddings_count_every_input_and_give_one_vector_each() -> None:
    body, lens = answer("embeddings", json.dumps({"input": ["a b c", "d e"]}).encode(), "m", 100, 8)
    doc = json.loads(body)
    assert lens == [3, 2] and doc["usage"]["prompt_tokens"] == 5
    assert [len(d["embedding"]) for d in doc["data"]] == [8, 8] and [d["index"] for d in doc["data"]] == [
        0,
        1,
    ]
    again, _ = answer("embeddings", json.dumps({"input": "a b c"}).encode(), "m", 100, 8)
    assert json.loads(again)["data"][0]["embedding"] == doc["data"][0]["embedding"]  # seeded by the text


def test_rerank_and_score_count_query_plus_document_per_pair() -> None:
    raw = json.dumps({"query": "a b", "documents": ["c d e", "f"]}).encode()
    doc, lens = answer("rerank", raw, "m", 100, 8)
    r = json.loads(doc)
    assert lens == [5, 3] and r["usage"] == {"total_tokens": 8}  # (2 + 3), (2 + 1); vLLM's rerank usage
    assert sorted(x["index"] for x in r["results"]) == [0, 1]
    s, lens2 = answer("score", json.dumps({"text_1": "a b", "text_2": ["c d e", "f"]}).encode(), "m", 100, 8)
    assert lens2 == [5, 3] and [d["score"] for d in json.loads(s)["data"]] == [
        x["relevance_score"] for x in sorted(r["results"], key=lambda x: x["index"])
    ]


@pytest.mark.parametrize(
    ("api", "body", "status"),
    [
        ("embeddings", {"model": "other", "input": "x"}, 404),
        ("embeddings", {}, 400),
        ("embeddings", {"input": " ".join(["w"] * 20)}, 400),  # above max_model_len
        ("rerank", {"query": "q", "documents": []}, 400),
        ("score", {"text_1": 3, "text_2": ["x"]}, 400),
    ],
)
def test_bad_pooling_requests(api: str, body: dict, status: int) -> None:
    with pytest.raises(ApiError) as e:
        answer(api, json.dumps(body).encode(), "m", 10, 8)
    assert e.value.status == status


def test_pooling_delay_is_a_step_plus_prefill() -> None:
    cfg = SimConfig(decode_step_ms=8.0, prefill_tokens_per_s=20_000.0)
    assert pooling_delay_s([2000], cfg) == pytest.approx(0.108)
    # with a cost per token pair each input pays its own pairs only (its own sequence): 2 x 1000·999/2, not
    # 2000·1999/2
    cfg.prefill_per_ctx_token_ns = 10.0
    assert pooling_delay_s([2000], cfg) == pytest.approx(0.108 + 10e-9 * 1_999_000)
    assert pooling_delay_s([1000, 1000], cfg) == pytest.approx(0.108 + 10e-9 * 999_000)


def test_responses_input_becomes_the_chat_prompt() -> None:
    chat = json.loads(
        as_chat_body(
            json.dumps(
                {"input": "hi there", "instructions": "be brief", "max_output_tokens": 4, "stream": True}
            ).encode()
        )
    )
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi there"},
    ]
    assert chat["max_tokens"] == 4 and chat["stream_options"] == {"include_usage": True}
    same = json.loads(as_chat_body(json.dumps({"input": [{"role": "user", "content": "hi there"}]}).encode()))
    assert tok.encode_chat(same["messages"]) == tok.encode_chat([{"role": "user", "content": "hi there"}])
    with pytest.raises(ApiError):
        as_chat_body(b'{"input": 5}')
