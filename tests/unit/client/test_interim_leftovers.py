"""The last stdlib clients skip interim 1xx responses too (RFC 9110 §15.2), like the main client: the MoE
sweep's expert counters, sweep-server's /health wait and `k8s wait`'s readiness poll (they used plain urllib,
which returned a 103 Early Hints as the answer)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from orchestration.capacity.serve_sweep import ServerProcess
from orchestration.k8s.wait import healthy
from orchestration.server.moe_experts import expert_counters
from tests.unit.client.quirk_server import CONTINUE, EARLY_HINTS, Quirks, QuirkServer

pytestmark = pytest.mark.timeout(30)
MOE = (
    b'vllm:moe_expert_tokens_total{engine="0",expert="0",model_name="m"} 5.0\n'
    b'vllm:moe_expert_tokens_total{engine="0",expert="1",model_name="m"} 7.0\n'
)


class _Server(QuirkServer):
    """The quirk server, with /health and MoE expert counters at /metrics."""

    def _answer(self, sock: Any, method: str, path: str, body: dict[str, Any]) -> bool:
        if method == "GET" and path in ("/health", "/metrics"):
            pre = self._interim(sock)
            text = b"" if path == "/health" else MOE
            sock.sendall(
                pre
                + b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                % (len(text), text)
            )
            return True
        return super()._answer(sock, method, path, body)


class _Threaded(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextmanager
def _serve(quirks: Quirks) -> Iterator[str]:
    srv = _Server(quirks)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            srv.handle(self.request)

    tcp = _Threaded(("127.0.0.1", 0), Handler)
    threading.Thread(target=tcp.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{tcp.server_address[1]}"
    finally:
        tcp.shutdown()
        tcp.server_close()


class _Running:
    returncode = None

    def poll(self) -> None:
        return None


INTERIMS = [pytest.param((EARLY_HINTS,), id="103"), pytest.param((CONTINUE, EARLY_HINTS), id="100-103")]


@pytest.mark.parametrize("interim", INTERIMS)
def test_expert_counters_skip_interim_responses(interim: tuple[bytes, ...]) -> None:
    with _serve(Quirks(interim=interim)) as url:
        assert expert_counters(url) == {"0": 5.0, "1": 7.0}


@pytest.mark.parametrize("interim", INTERIMS)
def test_k8s_wait_skips_interim_responses(interim: tuple[bytes, ...]) -> None:
    with _serve(Quirks(interim=interim)) as url:
        assert healthy(url + "/health", 5.0) == ""


@pytest.mark.parametrize("interim", INTERIMS)
def test_sweep_server_health_wait_skips_interim_responses(interim: tuple[bytes, ...]) -> None:
    proc = ServerProcess.__new__(ServerProcess)  # a server already started: only its /health wait is tested
    proc.proc = _Running()  # type: ignore[assignment]
    with _serve(Quirks(interim=interim)) as url:
        ok, _, why = proc.wait_healthy(url, timeout=3.0)
    assert ok, why
