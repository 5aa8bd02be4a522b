"""Every use of geventhttpclient's internals, in one place.

The hot path sends with geventhttpclient's connection pool and request builder and reads raw bytes through
its response parser (docs/architecture.md says why). Several of the members it needs are private
(`_build_request`, `_connection_pool`, `_sock`, `_body_buffer`, `_read_headers`); they are touched here
only, for the versions in `TESTED_VERSIONS` (pinned the same in pyproject.toml).
tests/unit/client/test_ghc_adapter.py checks each assumption, so an upgrade that breaks one fails loudly.

One fix of geventhttpclient itself lives here too: its response hands the socket back to the pool as soon as an
interim 1xx response (100 Continue, 103 Early Hints) is complete, while the final response is still to be read
on it; the next request can then take the socket mid-response. `ResponseWithHeaderHook` keeps it, and stands in
for geventhttpclient's response class in `HTTPClient.request` too (the users' model lookup and calibration).
"""

from __future__ import annotations

import errno
from typing import Any

import gevent
import geventhttpclient.client as _ghc_client
from geventhttpclient.client import HTTPClient
from geventhttpclient.response import (
    HTTPConnectionClosed,
    HTTPParseError,
    HTTPResponse,
    HTTPSocketPoolResponse,
)
from geventhttpclient.url import URL

TESTED_VERSIONS = (">=2.6", "<2.7")  # pyproject.toml pins the same range

__all__ = [
    "HTTPClient",
    "HTTPConnectionClosed",
    "HTTPParseError",
    "ResponseWithHeaderHook",
    "TESTED_VERSIONS",
    "client_for",
    "close_broken",
    "connection_pool",
    "request_bytes",
    "response_socket",
    "set_read_timeout",
    "take_body",
]


def client_for(user_agent: Any, host: str) -> HTTPClient:
    """The pooled HTTPClient of a Locust FastHttpSession's user agent (`session.client`) for `host`."""
    client: HTTPClient = user_agent.clientpool.get_client(URL(host))
    return client


def connection_pool(client: HTTPClient) -> Any:
    """The client's keep-alive pool (get_socket / return_socket / release_socket)."""
    return client._connection_pool


def set_read_timeout(client: HTTPClient, seconds: float) -> None:
    """The read timeout of every socket the client's pool hands out from now on."""
    client._connection_pool.network_timeout = float(seconds)


def request_bytes(client: HTTPClient, method: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The whole request (request line, the client's default and our headers, body) as one buffer."""
    head = client._build_request(method, path, body=body, headers=headers, chunked=False)
    return head.encode("latin-1") + body


def response_socket(resp: HTTPSocketPoolResponse) -> Any:
    """The response's socket; None once it was released to the pool or closed."""
    return resp._sock


def take_body(resp: HTTPSocketPoolResponse) -> bytes:
    """The body bytes the parser has buffered so far, removed from its buffer."""
    buf = resp._body_buffer
    if not buf:
        return b""
    data = bytes(buf)
    del buf[:]
    return data


def close_broken(resp: HTTPSocketPoolResponse) -> None:
    """Close a half-read response's connection (it must not go back to the pool) and release it."""
    if resp._sock is not None:
        resp._sock.close()
        resp.release()


class ResponseWithHeaderHook(HTTPSocketPoolResponse):
    """A pooled response whose header reads go through `recv_stamped(sock, size)`: geventhttpclient's own header
    loop (interim 1xx responses skipped), with the receive call replaceable (wire.StampedResponse stamps it).
    An interim response leaves the socket with this response (RFC 9110 §15.2: the final one follows on it)."""

    def recv_stamped(self, sock: Any, size: int) -> bytes:
        """One receive of the header loop."""
        data: bytes = sock.recv(size)
        return data

    def _on_message_complete(self) -> None:
        # once per message, not per chunk. 101 is no interim response, but it never completes a message here:
        # llhttp stops at the upgrade and the header loop raises HTTPParseError (a bad_response)
        if self.get_code() < 200:
            HTTPResponse._on_message_complete(self)  # complete, but not released: the final response follows
            return
        super()._on_message_complete()

    def _read_headers(self, pre_buffered: bytes = b"") -> None:
        sock = self._sock
        assert sock is not None
        try:
            start = not pre_buffered
            if pre_buffered:
                self.feed(pre_buffered)
            while not self.headers_complete or self.get_code() < 200:
                try:
                    data = self.recv_stamped(sock, self.block_size)
                    self.feed(data)
                    if not len(data):
                        if start:
                            raise HTTPConnectionClosed("connection closed.")
                        raise HTTPParseError("connection closed before end of the headers")
                    start = False
                except gevent.socket.error as e:
                    if e.errno == errno.ECONNRESET and start:
                        raise HTTPConnectionClosed("connection closed.") from e
                    raise
            if self.message_complete:
                self.release()
        except BaseException:
            self.release()
            raise


# geventhttpclient's HTTPClient.request builds its responses from this module global: the same fix for them
_ghc_client.HTTPSocketPoolResponse = ResponseWithHeaderHook  # type: ignore[misc, attr-defined, unused-ignore]
