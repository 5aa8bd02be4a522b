"""--reset-prefix-cache's preflight call: POST /reset_prefix_cache; a server without it (vLLM outside
VLLM_SERVER_DEV_MODE answers 404) or one that cannot reset gets a one-line warning, never a failure."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orchestration.server.preflight import reset_prefix_cache

pytestmark = pytest.mark.timeout(30)


@contextmanager
def _server(status: int, body: bytes) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(("POST", self.path))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_reset_posts_to_vllms_endpoint() -> None:
    with _server(200, json.dumps({"success": True}).encode()) as (url, seen):
        line = reset_prefix_cache(url, None)
    assert seen == [("POST", "/reset_prefix_cache")]
    assert line == "prefix cache reset (POST /reset_prefix_cache)"


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (404, b'{"detail":"Not Found"}', "HTTP 404 (vLLM serves it with VLLM_SERVER_DEV_MODE=1)"),
        (200, b'{"success":false}', "could not reset"),
        (500, b"{}", "HTTP 500"),
    ],
)
def test_a_server_that_does_not_reset_gets_one_warning_line(status: int, body: bytes, words: str) -> None:
    with _server(status, body) as (url, _):
        line = reset_prefix_cache(url, None)
    assert line.startswith("warning: --reset-prefix-cache: ") and words in line and "\n" not in line


def test_an_unreachable_server_gets_one_warning_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = reset_prefix_cache(f"http://127.0.0.1:{port}", None)
    assert line.startswith("warning: --reset-prefix-cache: ") and "connection refused" in line
