"""Flask's development server (Werkzeug, installed with Locust) as a streaming server: single-threaded it
answers HTTP/1.0 with the body delimited by the connection's close, threaded HTTP/1.1 chunked (with
`Connection: close`). Both readers read and time both, event by event."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from geventhttpclient import HTTPClient

from vllm_users.client import stream
from vllm_users.client.reactor import HAVE_EPOLL

GAP_S = 0.03
N_OUT = 5

APP = textwrap.dedent(f"""
    import json, sys, time
    from flask import Flask, Response
    from werkzeug.serving import make_server

    app = Flask("sse")

    @app.post("/v1/chat/completions")
    def chat():
        def gen():
            for i in range({N_OUT}):
                yield "data: " + json.dumps({{"choices": [{{"index": 0, "delta": {{"content": "t%d" % i}}}}]}}) + "\\n\\n"
                time.sleep({GAP_S})
            yield "data: " + json.dumps({{"choices": [], "usage": {{"prompt_tokens": 2, "completion_tokens": {N_OUT}}}}}) + "\\n\\n"
            yield "data: [DONE]\\n\\n"
        return Response(gen(), mimetype="text/event-stream")

    srv = make_server("127.0.0.1", 0, app, threaded=sys.argv[1] == "threaded")
    print(srv.server_port, flush=True)
    srv.serve_forever()
""")


@pytest.fixture(params=["single", "threaded"])
def werkzeug_server(request) -> Iterator[tuple[str, int]]:
    p = subprocess.Popen([sys.executable, "-c", APP, request.param], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline() if p.stdout else ""
        if not line.strip().isdigit():
            pytest.fail(f"Flask/Werkzeug server did not start: {line!r}")
        yield request.param, int(line)
    finally:
        p.terminate()
        p.wait(timeout=10)


@pytest.mark.parametrize(
    "use_reactor",
    [
        pytest.param(True, id="reactor", marks=pytest.mark.skipif(not HAVE_EPOLL, reason="no epoll")),
        pytest.param(False, id="greenlet"),
    ],
)
def test_werkzeug_streams_are_read_and_timed(werkzeug_server, monkeypatch, use_reactor: bool) -> None:
    mode, port = werkzeug_server
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    client = HTTPClient("127.0.0.1", port, network_timeout=10, concurrency=1)
    try:
        for _ in range(
            3
        ):  # several requests on one client: Werkzeug closes each connection, the next opens one
            res = stream.send_and_read(
                client,
                "/v1/chat/completions",
                json.dumps({"stream": True}).encode(),
                {"Content-Type": "application/json"},
            )
            assert res.error is None and res.done, (mode, res.error, res.error_detail)
            assert len(res.chunk_times) == N_OUT and res.usage == {
                "prompt_tokens": 2,
                "completion_tokens": N_OUT,
            }
            gaps = [b - a for a, b in zip(res.chunk_times, res.chunk_times[1:], strict=False)]
            assert min(gaps) >= GAP_S * 0.5, (mode, gaps)  # timed as the events came, not at the close
    finally:
        client.close()
