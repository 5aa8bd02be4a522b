"""What vllm_users/client/ghc_adapter.py assumes about geventhttpclient's internals holds for the installed version
(an upgrade that breaks one fails here, loudly, rather than as wrong timings)."""

from __future__ import annotations

import inspect
import re
from importlib.metadata import version
from pathlib import Path

import gevent
import tomllib
from geventhttpclient.client import HTTPClient
from geventhttpclient.response import HTTPSocketPoolResponse

from tests.unit.client.local_server import server_fixture
from vllm_users.client import ghc_adapter as A
from vllm_users.client.wire import StampedResponse, post

ROOT = Path(__file__).resolve().parents[3]


def _vtuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def test_installed_version_is_in_the_tested_and_pinned_range() -> None:
    v = _vtuple(version("geventhttpclient"))
    low, high = A.TESTED_VERSIONS
    assert _vtuple(low) <= v < _vtuple(high), f"geventhttpclient {v} outside the tested {A.TESTED_VERSIONS}"
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"geventhttpclient{low},{high}" in deps  # pyproject pins what the adapter was tested with


def test_private_members_exist_with_the_shapes_used() -> None:
    params = list(inspect.signature(HTTPClient._build_request).parameters)
    assert params[:6] == ["self", "method", "request_uri", "body", "headers", "chunked"]
    client = HTTPClient("127.0.0.1", 9, concurrency=1)
    try:
        pool = client._connection_pool
        assert all(callable(getattr(pool, m)) for m in ("get_socket", "return_socket", "release_socket"))
        A.set_read_timeout(client, 7.5)
        assert pool.network_timeout == 7.5
        head = A.request_bytes(client, "POST", "/v1/x", b"{}", {"X-A": "1"})
        assert head.startswith(b"POST /v1/x HTTP/1.1\r\n") and head.endswith(b"\r\n\r\n{}")
        assert b"X-A: 1\r\n" in head and b"Content-Length: 2\r\n" in head
    finally:
        client.close()
    assert callable(HTTPSocketPoolResponse._read_headers)  # overridden by ResponseWithHeaderHook
    src = inspect.getsource(HTTPSocketPoolResponse.__mro__[1].__init__)
    assert (
        "self._read_headers(" in src and "self._sock" in src
    )  # headers are read in __init__, through the hook
    assert "_body_buffer" in inspect.getsource(HTTPSocketPoolResponse.__mro__[2].__init__)


def _handle(sock, _addr) -> None:
    f = sock.makefile("rb")
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += f.readline()
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    gevent.sleep(0.05)
    sock.sendall(b"6\r\ndata: \r\n")
    gevent.sleep(0.05)
    sock.sendall(b"3\r\nok\n\r\n0\r\n\r\n")
    gevent.sleep(0.2)


server = server_fixture(_handle)


def test_stamped_reads_body_buffer_and_release(server) -> None:
    client = HTTPClient("127.0.0.1", server.server_port, network_timeout=5, concurrency=1)
    try:
        t0, resp = post(client, "/v1/chat/completions", b"{}", {"Content-Type": "application/json"})
        assert isinstance(resp, StampedResponse) and resp.status_code == 200
        assert resp.stamp >= t0  # the header read went through the stamped hook
        body = b""
        while not resp.message_complete:
            sock = A.response_socket(resp)
            assert sock is not None
            resp.feed(resp.recv_stamped(sock, 65536))
            body += A.take_body(resp)
        assert body == b"data: ok\n" and A.take_body(resp) == b""
        assert A.response_socket(resp) is None  # a complete message releases its socket to the pool
        _t0, resp = post(client, "/v1/chat/completions", b"{}", {})
        A.close_broken(resp)  # half read: closed, not pooled
        assert A.response_socket(resp) is None
    finally:
        client.close()
