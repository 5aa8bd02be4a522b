"""HTTP body framings and SSE line endings against a raw local server, through both readers (the hub's epoll
reactor and the greenlet-per-stream reader): chunked, Content-Length, and bodies delimited by the connection's
close (HTTP/1.0, or HTTP/1.1 with neither), each SSE event timed as its bytes arrive, connections reused only
when the framing allows."""

from __future__ import annotations

import itertools
import json
import socket
from dataclasses import dataclass, field

import gevent
import pytest
from gevent.server import StreamServer
from geventhttpclient import HTTPClient

from vllm_users.client import stream
from vllm_users.client.reactor import HAVE_EPOLL, reactor

GAP_S = 0.02  # between events: each chunk time must see it (a reader that waits for the close would not)
N_OUT = 6


@dataclass
class Script:
    framing: str  # chunked | length | close11 | close10 | short (Content-Length larger than what is sent)
    eol: bytes = b"\n"
    torn: bool = False  # close before [DONE]
    split_eol: bool = False  # each event's line end and blank line go out in separate writes


@dataclass
class Server:
    scripts: dict[str, Script] = field(default_factory=dict)
    connections: int = 0
    keys: itertools.count = field(default_factory=itertools.count)

    def add(self, script: Script) -> str:
        key = str(next(self.keys))
        self.scripts[key] = script
        return "/s/" + key

    def handle(self, sock, _addr) -> None:
        self.connections += 1
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle: each write its own segment
        f = sock.makefile("rb")
        while True:  # requests on this connection, while the framing keeps it open
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = f.readline()
                if not line:
                    return
                head += line
            lines = head.split(b"\r\n")
            length = int(next(h.split(b":")[1] for h in lines if h.lower().startswith(b"content-length")))
            f.read(length)
            script = self.scripts[lines[0].split()[1].decode().rsplit("/", 1)[1]]
            if not self._answer(sock, script):
                sock.close()
                return

    def _answer(self, sock, s: Script) -> bool:
        events = [
            b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": f"t{i}"}}]}).encode()
            for i in range(N_OUT)
        ]
        events.append(
            b"data: "
            + json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": N_OUT}}).encode()
        )
        if not s.torn:
            events.append(b"data: [DONE]")
        pieces = [[e + s.eol, s.eol] if s.split_eol else [e + s.eol + s.eol] for e in events]
        body_len = sum(len(p) for ps in pieces for p in ps)
        status = b"HTTP/1.0 200 OK" if s.framing == "close10" else b"HTTP/1.1 200 OK"
        head = status + b"\r\nContent-Type: text/event-stream\r\n"
        if s.framing == "chunked":
            head += b"Transfer-Encoding: chunked\r\n"
        elif s.framing in ("length", "short"):
            head += b"Content-Length: %d\r\n" % (body_len + (100 if s.framing == "short" else 0))
        sock.sendall(head + b"\r\n")
        for ps in pieces:
            for p in ps:
                sock.sendall(b"%x\r\n%s\r\n" % (len(p), p) if s.framing == "chunked" else p)
                gevent.sleep(GAP_S / len(ps))
        if s.framing == "chunked":
            sock.sendall(b"0\r\n\r\n")
            return True
        if s.framing == "length":
            return True
        gevent.sleep(0.1)  # the close comes well after the last event: the events must not be timed by it
        return False


@pytest.fixture()
def server():
    srv = Server()
    ss = StreamServer(("127.0.0.1", 0), srv.handle)
    ss.start()
    srv.port = ss.server_port  # type: ignore[attr-defined]
    yield srv
    ss.stop()


def _read_many(srv: Server, scripts: list[Script]) -> list[stream.StreamResult]:
    """Send one request per script, in order, over one client (one pooled connection at most)."""
    client = HTTPClient("127.0.0.1", srv.port, network_timeout=10, concurrency=1)  # type: ignore[attr-defined]
    try:
        return [
            stream.send_and_read(client, srv.add(s), b"{}", {"Content-Type": "application/json"})
            for s in scripts
        ]
    finally:
        client.close()


READERS = [
    pytest.param(True, id="reactor", marks=pytest.mark.skipif(not HAVE_EPOLL, reason="no epoll")),
    pytest.param(False, id="greenlet"),
]


def _assert_paced(res: stream.StreamResult) -> None:
    assert res.error is None and res.done, (res.error, res.error_detail)
    assert len(res.chunk_times) == N_OUT and res.usage == {"prompt_tokens": 3, "completion_tokens": N_OUT}
    gaps = [b - a for a, b in zip(res.chunk_times, res.chunk_times[1:], strict=False)]
    assert min(gaps) >= GAP_S * 0.5, gaps  # each event timed when it arrived, not in a burst
    assert res.t_end - res.chunk_times[-1] >= GAP_S  # the [DONE] event and the close came later


@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize("framing", ["close10", "close11", "chunked", "length"])
def test_every_framing_is_read_and_timed(server, monkeypatch, use_reactor: bool, framing: str) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    results = _read_many(server, [Script(framing) for _ in range(3)])
    for res in results:
        _assert_paced(res)
    # a close-delimited body closes its connection: each request opens a new one; the others reuse one
    assert server.connections == (3 if framing.startswith("close") else 1)
    assert not reactor().streams


@pytest.mark.parametrize("use_reactor", READERS)
def test_close_delimited_then_keep_alive_on_one_client(server, monkeypatch, use_reactor: bool) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    results = _read_many(
        server, [Script("close10"), Script("chunked"), Script("chunked"), Script("close11"), Script("length")]
    )
    for res in results:
        _assert_paced(res)
    assert server.connections == 3  # close10 | chunked, chunked, close11 | length


@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
@pytest.mark.parametrize("split_eol", [False, True], ids=["whole", "split"])
def test_sse_line_endings_over_the_wire(
    server, monkeypatch, use_reactor: bool, eol: bytes, split_eol: bool
) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    for res in _read_many(
        server, [Script("chunked", eol, split_eol=split_eol), Script("close10", eol, split_eol=split_eol)]
    ):
        _assert_paced(res)


@pytest.mark.parametrize("use_reactor", READERS)
def test_cut_bodies_are_truncated(server, monkeypatch, use_reactor: bool) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    torn, short, after = _read_many(
        server, [Script("close10", torn=True), Script("short"), Script("chunked")]
    )
    assert torn.error == "truncated" and torn.error_detail == "stream ended without [DONE]"
    assert len(torn.chunk_times) == N_OUT  # what came is still timed
    assert (
        short.error == "truncated"
        and "before the end of the body" in (short.error_detail or "")
        or (short.error == "truncated" and short.error_detail is not None)
    ), short.error_detail
    _assert_paced(after)  # a fresh connection after both
    assert server.connections == 3
