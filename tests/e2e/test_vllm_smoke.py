"""Smoke test of the real vLLM fixture: models list, one streamed chat, one completion."""

from __future__ import annotations

import http.client
import json

from tests.e2e.speed import scaled


def _request(server, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=scaled(60))
    try:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"} if payload else {}
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_models_list(vllm_server):
    status, body = _request(vllm_server, "GET", "/v1/models")
    assert status == 200
    data = json.loads(body)
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == [vllm_server.model_name]


def test_streamed_chat(vllm_server):
    status, body = _request(
        vllm_server,
        "POST",
        "/v1/chat/completions",
        {
            "model": vllm_server.model_name,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8,
            "temperature": 0,
            "seed": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert status == 200
    events = [line[len(b"data: ") :] for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 8
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_completion(vllm_server):
    status, body = _request(
        vllm_server,
        "POST",
        "/v1/completions",
        {
            "model": vllm_server.model_name,
            "prompt": "def hello():",
            "max_tokens": 8,
            "temperature": 0,
            "seed": 0,
            "ignore_eos": True,
        },
    )
    assert status == 200, body
    data = json.loads(body)
    assert data["object"] == "text_completion"
    assert data["usage"]["completion_tokens"] == 8
    assert data["choices"][0]["finish_reason"] == "length"
