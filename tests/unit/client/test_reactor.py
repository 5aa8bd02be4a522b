"""The hub's reader of stream bodies (vllm_users/client/reactor.py) against a local SSE server: many streams at once,
the same results as the greenlet-per-stream reader, read timeouts, torn streams, killed readers."""

from __future__ import annotations

import json
import time

import gevent
import pytest
from geventhttpclient import HTTPClient

from tests.unit.client.local_server import server_fixture
from vllm_users.client import stream
from vllm_users.client.reactor import HAVE_EPOLL, reactor

pytestmark = pytest.mark.skipif(not HAVE_EPOLL, reason="the reactor needs epoll (Linux)")

GAP_S = 0.004


def _event(i: int) -> bytes:
    doc = {"choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}
    data = b"data: " + json.dumps(doc).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _handle(sock, _addr) -> None:
    f = sock.makefile("rb")
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += f.readline()
    length = int(
        next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
    )
    body = json.loads(f.read(length))
    n, mode = body["n"], body.get("mode", "ok")
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    for i in range(n):
        if mode == "torn" and i == n // 2:
            sock.close()
            return
        if mode == "hang" and i == n // 2:
            gevent.sleep(30)
            return
        sock.sendall(_event(i))
        gevent.sleep(GAP_S)
    done = b"data: [DONE]\n\n"
    sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))


server = server_fixture(_handle)


def _read(server, n: int, mode: str = "ok", timeout: float = 10.0) -> stream.StreamResult:
    client = HTTPClient("127.0.0.1", server.server_port, network_timeout=timeout, concurrency=1)
    try:
        body = json.dumps({"n": n, "mode": mode}).encode()
        return stream.send_and_read(
            client, "/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
    finally:
        client.close()


@pytest.mark.parametrize("use_reactor", [True, False])
def test_many_streams_read_in_order_with_paced_chunk_times(server, monkeypatch, use_reactor: bool) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    jobs = [gevent.spawn(_read, server, 40) for _ in range(32)]
    gevent.joinall(jobs, timeout=30, raise_error=True)
    for job in jobs:
        res = job.value
        assert res.error is None and res.done and len(res.chunk_times) == 40
        gaps = [b - a for a, b in zip(res.chunk_times, res.chunk_times[1:], strict=False)]
        assert min(gaps) >= 0
        # the server sleeps GAP_S between events: the stamps see the pacing, not a burst at the end
        assert sum(gaps) >= 39 * GAP_S * 0.9
    assert not reactor().streams  # every stream unregistered


def test_torn_stream_is_truncated_and_reader_survives(server) -> None:
    assert stream.USE_REACTOR
    res = _read(server, 20, "torn")
    assert res.error == "truncated" and len(res.chunk_times) == 10
    assert _read(server, 5).error is None  # the reactor still serves the next stream
    assert not reactor().streams


def test_silent_stream_times_out_after_the_read_timeout(server) -> None:
    t0 = time.perf_counter()
    res = _read(server, 10, "hang", timeout=0.6)
    took = time.perf_counter() - t0
    assert res.error == "timeout" and res.error_detail == "read timed out" and len(res.chunk_times) == 5
    assert 0.6 <= took < 2.0
    assert not reactor().streams and reactor().timer is None


def test_killed_reader_is_unregistered(server) -> None:
    job = gevent.spawn(_read, server, 10, "hang", 30.0)
    deadline = time.perf_counter() + 5
    while not reactor().streams and time.perf_counter() < deadline:
        gevent.sleep(0.01)
    assert len(reactor().streams) == 1
    job.kill()
    assert not reactor().streams and reactor().timer is None
