"""The preflight probes the run's --endpoint before any load: a server without it is one line, exit 3."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestration.server.preflight import check_server
from vllm_users.errors import PreflightError

SERVED = {"/v1/chat/completions"}  # a generative model: no pooling APIs, no Responses


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._answer(200, "application/json", json.dumps({"data": [{"id": "m"}]}).encode())

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path not in SERVED:
            self._answer(404, "application/json", b'{"detail":"Not Found"}')
        else:
            self._answer(
                200, "text/event-stream", b'data: {"choices":[{"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n'
            )

    def _answer(self, status: int, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.mark.parametrize("endpoint", ["embeddings", "rerank", "score", "responses"])
def test_an_endpoint_the_server_lacks_is_a_preflight_error(url: str, endpoint: str) -> None:
    with pytest.raises(
        PreflightError,
        match=f"--endpoint {endpoint}: POST /v1/{endpoint} on .* returned HTTP 404: "
        "the server does not serve it",
    ) as e:
        check_server(url, None, None, endpoint)
    assert e.value.exit_code == 3 and "\n" not in str(e.value)


def test_the_chat_endpoint_still_passes(url: str) -> None:
    assert check_server(url, None, None, "chat").model == "m"
