"""The send path and kernel-stamped reads under the stream reader.

One POST goes out in a single `sendall` right after the start timestamp; every read (the headers' included)
uses `recvmsg` with `SO_TIMESTAMPNS`, so each byte is stamped with when it reached the socket, not when
this greenlet got round to reading it (docs/metrics.md).
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import struct
import sys
import weakref
from time import perf_counter, time
from typing import Any

from gevent.socket import wait_read

from vllm_users.client import tls
from vllm_users.client.ghc_adapter import (
    HTTPClient,
    HTTPConnectionClosed,
    HTTPParseError,
    ResponseWithHeaderHook,
    connection_pool,
    request_bytes,
    take_body,
)

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else 0)
KERNEL_TIMESTAMPS = bool(_SO_TIMESTAMPNS) and os.environ.get("VLLM_LOCUST_KERNEL_TIMESTAMPS", "1") != "0"
_ANC = socket.CMSG_SPACE(16) if KERNEL_TIMESTAMPS else 0
_TS = struct.Struct("qq")
BLOCK = 65536
_STAMPED: weakref.WeakSet[Any] = weakref.WeakSet()  # pooled sockets that already have SO_TIMESTAMPNS on


def read_stamped(
    sock: Any, size: int, kernel: bool, wall_minus_perf: float, prev: float = 0.0
) -> tuple[bytes, float]:
    """One recv on `sock` and when its bytes arrived (perf_counter s): the kernel's receive stamp when
    `kernel`, else the clock right after the read; never in the future. A gevent socket waits for data; a
    non-blocking stdlib socket raises BlockingIOError when there is none. Over TLS (a gevent SSL socket) the bytes
    are decrypted, stamped when their record arrived (tls.read_record; `prev`, the stamp of the read before, is
    that of bytes decrypted then and still pending)."""
    parts = tls.ssl_parts(sock)
    if parts is not None:
        return read_tls(sock, parts, size, kernel, wall_minus_perf, prev)
    if kernel:
        data, anc, _flags, _addr = sock.recvmsg(size, _ANC)
        now = perf_counter()
        if anc:
            sec, nsec = _TS.unpack_from(anc[0][2])
            stamped = sec + nsec * 1e-9 - wall_minus_perf
            if stamped < now:
                now = stamped
        return data, now
    data = sock.recv(size)
    return data, perf_counter()


def read_tls(
    sock: Any, parts: tuple[Any, Any], size: int, kernel: bool, wall_minus_perf: float, prev: float = 0.0
) -> tuple[bytes, float]:
    """One decrypted read of a gevent SSL socket and its arrival stamp; waits (the socket's timeout: TimeoutError)
    until a whole record is in."""
    sslobj, raw = parts
    while True:
        try:
            return tls.read_record(sslobj, raw, size, kernel, wall_minus_perf, prev or perf_counter())
        except ssl.SSLWantReadError:
            wait_read(raw.fileno(), timeout=sock.timeout)


class StampedResponse(ResponseWithHeaderHook):
    """A geventhttpclient response whose every recv is stamped (`.stamp`, perf_counter seconds)."""

    def __init__(self, sock: Any, pool: Any, *, wall_minus_perf: float, kernel: bool, **kw: Any) -> None:
        self.wall_minus_perf = wall_minus_perf  # kernel stamps are CLOCK_REALTIME
        self.kernel = kernel
        self.stamp = 0.0
        super().__init__(sock, pool, **kw)

    def recv_stamped(self, sock: Any, size: int) -> bytes:
        """Receive and set `.stamp` to the arrival time of what was read (never in the future)."""
        data, self.stamp = read_stamped(sock, size, self.kernel, self.wall_minus_perf, self.stamp)
        return data

    def drain_into(self, events: Any, now: float) -> bool:
        """Hand the body bytes parsed so far to `events.feed(data, now)`; True once the body is complete."""
        data = take_body(self)
        if data:
            events.feed(data, now)
        return self.message_complete

    def end_of_input(self) -> None:
        """The server closed the connection (recv gave b""). A body delimited by the close (HTTP/1.0, or
        HTTP/1.1 without Content-Length or chunked) is complete now; any other body was cut short:
        HTTPConnectionClosed. Completion releases the socket, closed, since the server ended it."""
        try:
            self.feed(b"")  # the parser's EOF: completes a close-delimited message, rejects the others
        except HTTPParseError:
            raise HTTPConnectionClosed("connection closed by server before the end of the body") from None
        if not self.message_complete:
            raise HTTPConnectionClosed("connection closed by server before the end of the body")


def post(
    client: HTTPClient, path: str, body: bytes, headers: dict[str, str]
) -> tuple[float, StampedResponse]:
    """Send one POST; returns (start perf_counter, response with headers read).

    A pooled keep-alive connection that the server already closed fails before any byte comes back; that
    one case is retried once on a fresh connection (the server never saw the request).
    """
    request = request_bytes(client, "POST", path, body, headers)
    pool = connection_pool(client)
    for attempt in (0, 1):
        sock = pool.get_socket()
        kernel = KERNEL_TIMESTAMPS
        if kernel and sock not in _STAMPED:  # once per connection, not per request (a syscall each)
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                _STAMPED.add(sock)
            except OSError:
                kernel = False
        wall_minus_perf = time() - perf_counter()
        t0 = perf_counter()
        try:
            sock.sendall(request)
        except OSError as e:
            pool.release_socket(sock)
            if attempt == 0 and e.errno in (errno.ECONNRESET, errno.EPIPE):
                continue
            raise
        try:
            resp = StampedResponse(
                sock,
                pool,
                wall_minus_perf=wall_minus_perf,
                kernel=kernel,
                block_size=BLOCK,
                method="POST",
                headers_type=client.headers_type,
            )
        except HTTPConnectionClosed:
            if attempt == 0:
                continue
            raise
        return t0, resp
    raise HTTPConnectionClosed("connection closed")  # unreachable: the loop returns or raises
