"""Fuzzing: the request parser and the HTTP layer never die, whatever the bytes."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_sim import probe
from vllm_sim.http import Connection, HttpRequest
from vllm_sim.launch import SimProcess
from vllm_sim.request import ApiError, build_plan, parse_request

pytestmark = pytest.mark.timeout(120)
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=20,
)
FIELDS = [
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "stream",
    "stream_options",
    "stop",
    "seed",
    "n",
    "ignore_eos",
    "tools",
    "tool_choice",
    "response_format",
    "guided_json",
    "structured_outputs",
]
bodies = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=8)


def _check(raw: bytes, chat: bool) -> None:
    try:
        req = parse_request(raw, chat, "m", 512)
    except ApiError as e:
        assert 400 <= e.status < 500
        json.loads(e.body())
        return
    plan = build_plan(req, random.Random(0), 0.3)
    assert 1 <= plan.n_tokens <= req.max_tokens


@FUZZ
@given(bodies, st.booleans())
def test_parse_request_only_raises_api_errors(body: dict[str, Any], chat: bool) -> None:
    _check(json.dumps(body).encode(), chat)


@FUZZ
@given(st.binary(max_size=200), st.booleans())
def test_parse_request_survives_arbitrary_bytes(raw: bytes, chat: bool) -> None:
    _check(raw, chat)


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@FUZZ
@given(
    st.lists(
        st.binary(max_size=120)
        | st.sampled_from(
            [
                b"GET /health HTTP/1.1\r\n\r\n",
                b"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\n{}",
                b"\r\n\r\n",
                b"Content-Length: -1\r\n",
                b"GET / HTTP/2\r\n\r\n",
                b"X: y\r\n",
            ]
        ),
        max_size=6,
    )
)
def test_http_parser_never_raises(parts: list[bytes]) -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    seen: list[HttpRequest] = []

    def handler(conn: Connection, req: HttpRequest) -> None:
        seen.append(req)
        conn.respond(200, b"{}")

    try:
        conn = Connection(handler, max_body=1000)
        t = _Transport()
        conn.connection_made(t)
        for p in parts:
            if t.closed:
                break
            conn.data_received(p)
        loop.run_until_complete(asyncio.sleep(0))
        conn.connection_lost(None)
        assert t.out.count(b"HTTP/1.1 ") >= len(seen)
    finally:
        loop.close()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies, st.sampled_from(["/v1/chat/completions", "/v1/completions", "/tokenize"]))
def test_live_server_keeps_serving(sim: SimProcess, body: dict[str, Any], path: str) -> None:
    if isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 64:
        body["max_tokens"] = 64  # keep each example short in time
    body.pop("max_completion_tokens", None)
    body.setdefault("max_tokens", 8)
    r = probe.request(sim.url, path, body, timeout=10)
    assert r.status in (200, 400, 404), (r.status, r.body)
    assert r.complete, r.error
    assert probe.request(sim.url, "/health").status == 200
