"""--wait-for-server: a server that answers 503 (Retry-After) or refuses while it starts is waited for, one line
per wait; without the option, or past its time, the one-line error names the server's last answer."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orchestration.launch.ports import free_port
from orchestration.server import server_wait
from orchestration.server.preflight import check_server
from orchestration.server.server_wait import Wait
from tests.unit.server.http_fake import serving
from vllm_users.errors import PreflightError

pytestmark = pytest.mark.timeout(30)

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
SSE = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n'


@contextmanager
def _starting(unready: int) -> Iterator[str]:
    """A server whose first `unready` GET /v1/models answer 503 with Retry-After: 1, then a model list."""
    left = [unready]

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, status: int, ctype: str, body: bytes, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if left[0] > 0:
                left[0] -= 1
                self._send(503, "application/json", b'{"detail":"loading"}', {"Retry-After": "1"})
            else:
                self._send(200, "application/json", MODELS)

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(200, "text/event-stream", SSE)

        def log_message(self, *_: object) -> None:
            pass

    with serving(Handler) as url:
        yield url


@pytest.fixture
def pauses(monkeypatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(server_wait.time, "sleep", slept.append)
    return slept


def test_a_server_that_answers_503_while_starting_is_waited_for(pauses) -> None:
    lines: list[str] = []
    with _starting(2) as url:
        info = check_server(url, None, None, wait=Wait(30.0, lines.append))
    assert info.model == "m" and info.attempts == [200]
    assert pauses == [1.0, 1.0]  # the server's Retry-After
    assert len(lines) == 2 and all("GET /v1/models answered HTTP 503 (Retry-After: 1)" in x for x in lines)
    assert all(x.startswith(f"waiting for {url}: ") for x in lines)


def test_without_the_option_a_starting_server_is_named_not_ready_not_incompatible() -> None:
    with _starting(5) as url, pytest.raises(PreflightError) as e:
        check_server(url, None, None)
    said = str(e.value)
    assert "not an OpenAI-compatible server" not in said
    assert (
        "is not ready: GET /v1/models answered HTTP 503 (Retry-After: 1)" in said
        and "--wait-for-server" in said
    )


def test_a_refused_connection_is_waited_for_then_named_with_the_time_given(pauses, monkeypatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(server_wait.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(
        server_wait.time, "sleep", lambda s: (pauses.append(s), clock.__setitem__(0, clock[0] + s))
    )
    lines: list[str] = []
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(PreflightError) as e:
        check_server(url, None, None, wait=Wait(3.0, lines.append))
    assert str(e.value) == f"{url} is not ready after 3 s (--wait-for-server): connection refused"
    assert pauses == [0.5, 1.0, 1.5] and len(lines) == 3  # no Retry-After: longer each time, within the 3 s
