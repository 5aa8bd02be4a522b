"""The simulator's HTTP API end to end: shapes, usage, errors, keep-alive, /metrics, /tokenize."""

from __future__ import annotations

import json
import socket

import jsonschema
import pytest

from vllm_sim import probe
from vllm_sim.launch import SimProcess, start_simulator

pytestmark = pytest.mark.timeout(60)
MSG = [{"role": "user", "content": "tell me a story"}]


def chat(sim: SimProcess, **kw: object) -> probe.ProbeResult:
    return probe.request(sim.url, "/v1/chat/completions", {"messages": MSG, **kw})


def test_chat_stream_shape(sim: SimProcess) -> None:
    r = chat(sim, max_tokens=5, ignore_eos=True, stream=True, stream_options={"include_usage": True})
    assert r.status == 200 and r.complete and r.headers["content-type"].startswith("text/event-stream")
    d = r.data()
    assert d[-1] == "[DONE]"
    role, *content, usage, _ = d
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["id"].startswith("chatcmpl-") and role["object"] == "chat.completion.chunk"
    assert len(content) == 5 and all(c["choices"][0]["delta"]["content"].startswith(" ") for c in content)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 4 + ["length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["prompt_tokens"] == 4 + 4 + 3
    assert len({c["id"] for c in d[:-1]}) == 1


def test_no_usage_chunk_without_include_usage(sim: SimProcess) -> None:
    d = chat(sim, max_tokens=3, ignore_eos=True, stream=True).data()
    assert len(d) == 1 + 3 + 1 and all("usage" not in c for c in d[:-1])


def test_continuous_usage_stats(sim: SimProcess) -> None:
    d = chat(
        sim,
        max_tokens=3,
        ignore_eos=True,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    ).data()
    assert [c["usage"]["completion_tokens"] for c in d[:-1]] == [0, 1, 2, 3, 3]


def test_completions_stream_and_nonstream(sim: SimProcess) -> None:
    r = probe.request(
        sim.url, "/v1/completions", {"prompt": "a b c", "max_tokens": 4, "ignore_eos": True, "stream": True}
    )
    d = r.data()
    assert len(d) == 5 and d[0]["object"] == "text_completion" and d[0]["id"].startswith("cmpl-")
    assert d[3]["choices"][0]["finish_reason"] == "length"
    r = probe.request(sim.url, "/v1/completions", {"prompt": "a b c", "max_tokens": 4, "ignore_eos": True})
    body = r.json()
    assert body["usage"]["completion_tokens"] == 4 and body["usage"]["prompt_tokens"] == 3
    assert len(body["choices"][0]["text"].split()) == 4


def test_chat_nonstream_and_seed_determinism(sim: SimProcess) -> None:
    a = chat(sim, max_tokens=8, seed=42).json()
    b = chat(sim, max_tokens=8, seed=42).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["object"] == "chat.completion" and a["choices"][0]["message"]["role"] == "assistant"
    assert a["usage"]["total_tokens"] == a["usage"]["prompt_tokens"] + a["usage"]["completion_tokens"]


def test_json_schema_stream_is_valid(sim: SimProcess) -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 3, "maximum": 9},
            "b": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1},
        },
        "required": ["a", "b"],
    }
    for rf in (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}},
        {"structured_outputs": {"json": schema}},
        {"guided_json": schema},
    ):
        d = chat(sim, max_tokens=200, stream=True, stream_options={"include_usage": True}, **rf).data()
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in d[:-2])
        jsonschema.validate(json.loads(text), schema)
        assert d[-2]["usage"]["completion_tokens"] == len(d) - 3
    d = chat(sim, max_tokens=200, stream=True, response_format={"type": "json_object"}).data()
    assert isinstance(json.loads("".join(c["choices"][0]["delta"].get("content", "") for c in d[:-1])), dict)


def test_tool_call_stream(sim: SimProcess) -> None:
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": params}}]
    d = chat(
        sim,
        max_tokens=100,
        stream=True,
        tools=tools,
        tool_choice="required",
        stream_options={"include_usage": True},
    ).data()
    head = d[1]["choices"][0]["delta"]["tool_calls"][0]
    assert head["id"].startswith("chatcmpl-tool-") and head["type"] == "function" and head["index"] == 0
    assert head["function"] == {"name": "get_weather"}  # vLLM 0.32 sends no "arguments" here
    args = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in d[2:-2])
    jsonschema.validate(json.loads(args), params)
    assert d[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert d[-2]["usage"]["completion_tokens"] == len(d) - 3
    named = chat(
        sim,
        max_tokens=100,
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    ).json()
    call = named["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and named["choices"][0]["finish_reason"] == "tool_calls"
    outcomes = {
        chat(sim, max_tokens=50, tools=tools, seed=s).json()["choices"][0]["finish_reason"] for s in range(12)
    }
    assert "tool_calls" in outcomes and outcomes - {"tool_calls"}


def test_errors_are_vllm_shaped_and_server_survives(sim: SimProcess) -> None:
    cases = [
        (b"{not json", 400),
        (json.dumps({"model": "x", "messages": MSG}).encode(), 404),
        (json.dumps({"messages": MSG, "max_tokens": 5000}).encode(), 400),
        (json.dumps({"prompt": 5}).encode(), 400),
    ]
    for raw, status in cases:
        r = probe.request(
            sim.url,
            "/v1/chat/completions" if b"messages" in raw or raw[0:1] == b"{n" else "/v1/completions",
            raw,
        )
        assert r.status == status, r.body
        err = r.json()["error"]
        assert err["code"] == status and err["type"] in ("BadRequestError", "NotFoundError", "Bad Request")
    assert probe.request(sim.url, "/nope").status == 404
    assert probe.request(sim.url, "/health").status == 200


def test_body_too_large_and_api_key() -> None:
    with start_simulator(
        ["--fixed", "--ttft-ms", "1", "--itl-ms", "1", "--max-body-bytes", "1000", "--api-key", "sekret"]
    ) as p:
        r = probe.request(
            p.url, "/v1/completions", {"prompt": "x " * 1000}, headers={"Authorization": "Bearer sekret"}
        )
        assert r.status == 413
        r = probe.request(p.url, "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert r.status == 401 and r.json() == {"error": "Unauthorized"}
        r = probe.request(
            p.url,
            "/v1/completions",
            {"prompt": "x", "max_tokens": 2},
            headers={"Authorization": "Bearer sekret"},
        )
        assert r.status == 200
        assert probe.request(p.url, "/health").status == 200


def test_keep_alive_pipelining_and_connection_close(sim: SimProcess) -> None:
    s = socket.create_connection(("127.0.0.1", sim.port), timeout=5)
    for _ in range(3):
        r = probe.request(
            sim.url, "/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True}, sock=s
        )
        assert r.complete and r.data()[-1] == "[DONE]"
    # two pipelined requests in one segment, then Connection: close
    req = (
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    s.sendall(req)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    assert data.count(b"HTTP/1.1 200") == 2 and b"connection: close" in data and b'"version"' in data
    s.close()


def test_models_version_tokenize(sim: SimProcess) -> None:
    m = probe.request(sim.url, "/v1/models").json()
    assert m["data"][0]["id"] == "sim-model" and m["data"][0]["max_model_len"] == 2048
    assert "version" in probe.request(sim.url, "/version").json()
    t = probe.request(sim.url, "/tokenize", {"model": "sim-model", "prompt": "one two three"}).json()
    assert t["count"] == 3 and len(t["tokens"]) == 3 and t["max_model_len"] == 2048
    t = probe.request(sim.url, "/tokenize", {"messages": MSG}).json()
    u = chat(sim, max_tokens=1).json()["usage"]
    assert t["count"] == u["prompt_tokens"]


def test_metrics_names(sim: SimProcess) -> None:
    chat(sim, max_tokens=3, stream=True)
    text = probe.request(sim.url, "/metrics").body.decode()
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_queue_time_seconds_sum",
        "vllm:num_preemptions_total",
        "sim:emit_lateness_seconds_bucket",
        "sim:requests_served_total",
    ):
        assert name in text, name
    assert 'model_name="sim-model"' in text
    stats = probe.request(sim.url, "/sim/stats").json()
    assert stats["served"] >= 1 and stats["generation_tokens"] >= 3


def test_openai_client_if_installed(sim: SimProcess) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x")
    out = client.chat.completions.create(model="sim-model", messages=MSG, max_tokens=4)
    assert out.usage.completion_tokens >= 1
    chunks = list(
        client.chat.completions.create(
            model="sim-model", messages=MSG, max_tokens=4, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage is not None
