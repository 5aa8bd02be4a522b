"""A small, fast HTTP/1.1 server protocol: keep-alive, Content-Length bodies, chunked responses.

Written on ``asyncio.Protocol`` rather than a framework because the simulator must push ~50k SSE
events per second from one core; one request at a time per connection (pipelined requests wait in
the buffer until the current response has ended).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("vllm_sim.http")

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Request Entity Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
MAX_HEADER_BYTES = 64 * 1024

_date_cache: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    """The Date header value, rendered at most once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, email.utils.formatdate(now, usegmt=True).encode())
    return _date_cache[1]


@dataclass
class HttpRequest:
    """One parsed request."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes = b""
    keep_alive: bool = True
    received: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)


_turn: list[float | None] = [None]


def _clear_turn() -> None:
    _turn[0] = None


def _turn_time(loop: asyncio.AbstractEventLoop) -> float:
    """The time this loop turn began handling readable sockets: every request that was ready when the
    selector returned gets that instant, not a later one that grows with the number of connections."""
    t = _turn[0]
    if t is None:
        t = _turn[0] = loop.time()
        loop.call_soon(_clear_turn)  # runs after every read callback of this turn
    return t


class Connection(asyncio.Protocol):
    """One client connection; hands complete requests to ``handler(conn, request)``."""

    def __init__(
        self,
        handler: Callable[[Connection, HttpRequest], None],
        max_body: int,
        on_open: Callable[[Connection], None] | None = None,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.handler = handler
        self.max_body = max_body
        self.on_open = on_open
        self.on_close = on_close
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False  # a response is in progress: do not parse the next request yet
        self.closed = False
        self.keep_alive = True
        self.stream: object | None = None  # the engine's stream object while streaming
        self.loop = asyncio.get_event_loop()
        self.started_at = 0.0  # loop time the first byte of the request being buffered arrived
        self._parse_scheduled = False

    # -- asyncio callbacks -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport."""
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check
        self.transport = transport  # type: ignore[assignment]
        if self.on_open:
            self.on_open(self)

    def data_received(self, data: bytes) -> None:
        """Buffer bytes (stamping when a request's first byte came) and parse them on the next loop turn."""
        if not self.buf:
            self.started_at = _turn_time(self.loop)
        self.buf += data
        if not self.busy and not self._parse_scheduled:
            # Parsing waits until every connection that became readable in this loop turn has been stamped:
            # 64 requests arriving together then all get their true arrival time, not one parse apart.
            self._parse_scheduled = True
            self.loop.call_soon(self._parse_later)
        elif len(self.buf) > self.max_body + MAX_HEADER_BYTES and self.transport:
            self.transport.pause_reading()  # a client that pipelines without limit waits

    def connection_lost(self, exc: Exception | None) -> None:
        """Tell the running stream (if any) that its client went away."""
        self.closed = True
        stream = self.stream
        self.stream = None
        if stream is not None:
            cancel = getattr(stream, "cancel", None)
            if cancel:
                cancel()
        if self.on_close:
            self.on_close(self)

    # -- parsing ---------------------------------------------------------------------------
    def _parse_later(self) -> None:
        self._parse_scheduled = False
        self._parse()

    def _parse(self) -> None:
        """Parse and dispatch requests while the previous response is complete."""
        while not self.busy and not self.closed and self.buf:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEADER_BYTES:
                    self._fail(431, b'{"detail":"Request header too large"}')
                return
            try:
                head = bytes(self.buf[:end]).decode("latin-1")
                lines = head.split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                if not version.startswith("HTTP/1."):
                    raise ValueError(version)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if not sep or not name or name != name.strip():
                        raise ValueError(line)
                    headers[name.lower()] = value.strip()
                length = int(headers.get("content-length", "0") or "0")
                if length < 0:
                    raise ValueError("negative length")
            except (ValueError, UnicodeDecodeError):
                self._fail(400, b'{"detail":"Invalid HTTP request"}')
                return
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._fail(411, b'{"detail":"Chunked request bodies are not supported"}')
                return
            if length > self.max_body:
                self._fail(
                    413,
                    b'{"error":{"message":"Request body too large","type":"BadRequestError",'
                    b'"param":null,"code":413}}',
                )
                return
            total = end + 4 + length
            if len(self.buf) < total:
                return
            body = bytes(self.buf[end + 4 : total])
            del self.buf[:total]
            received = self.started_at
            if self.buf:  # a pipelined request follows: it is here now at the latest
                self.started_at = self.loop.time()
            conn_hdr = headers.get("connection", "").lower()
            keep = "close" not in conn_hdr and (version == "HTTP/1.1" or "keep-alive" in conn_hdr)
            path, _, query = target.partition("?")
            self.busy = True
            self.keep_alive = keep
            req = HttpRequest(method.upper(), path, query, headers, body, keep, received)
            try:
                self.handler(self, req)
            except Exception:  # the server must keep serving whatever a handler does
                log.exception("handler failed")
                if self.busy and not self.closed:
                    self.respond(
                        500,
                        b'{"error":{"message":"Internal error","type":"InternalServerError",'
                        b'"param":null,"code":500}}',
                    )
        if self.transport and not self.busy and not self.closed:
            self.transport.resume_reading()

    def _fail(self, status: int, body: bytes) -> None:
        """Answer a request we could not parse and close (the stream position is lost)."""
        self.keep_alive = False
        self.busy = True
        self.respond(status, body)

    # -- responses -------------------------------------------------------------------------
    def _head(
        self,
        status: int,
        headers: list[tuple[str, str]],
        content_type: str,
        length: int | None,
        vary: bool = True,
    ) -> bytes:
        """Status line and headers, in uvicorn's order (length, type, extra, vary, connection, TE)."""
        out = [
            b"HTTP/1.1 %d %s\r\ndate: %s\r\nserver: uvicorn\r\n"
            % (status, REASONS.get(status, "Unknown").encode(), _date())
        ]
        if length is not None:
            out.append(b"content-length: %d\r\n" % length)
        if content_type:
            out.append(b"content-type: " + content_type.encode() + b"\r\n")
        for k, v in headers:
            out.append(f"{k}: {v}\r\n".encode("latin-1", "replace"))
        if vary:  # added by vLLM's CORS middleware, which the auth check runs before
            out.append(b"vary: Origin\r\n")
        if not self.keep_alive:
            out.append(b"connection: close\r\n")
        out.append(b"\r\n" if length is not None else b"transfer-encoding: chunked\r\n\r\n")
        return b"".join(out)

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
        vary: bool = True,
    ) -> None:
        """Send a complete response and move on to the next request (or close)."""
        if self.closed or self.transport is None:
            return
        self.transport.write(self._head(status, headers or [], content_type, len(body), vary) + body)
        self._finish()

    def start_stream(
        self,
        status: int = 200,
        headers: list[tuple[str, str]] | None = None,
        content_type: str = "text/event-stream; charset=utf-8",
    ) -> None:
        """Send the headers of a chunked (SSE) response."""
        if self.closed or self.transport is None:
            return
        self.transport.write(self._head(status, headers or [], content_type, None))

    @staticmethod
    def frame(data: bytes) -> bytes:
        """Wrap bytes in one chunk of chunked transfer-encoding."""
        return b"%x\r\n%s\r\n" % (len(data), data)

    def write_raw(self, data: bytes) -> None:
        """Write already-framed bytes."""
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def end_stream(self, framed: bytes = b"") -> None:
        """Write the last (already framed) chunks and the terminating zero-length chunk, then move on."""
        if self.closed or self.transport is None:
            return
        self.stream = None
        self.transport.write(framed + b"0\r\n\r\n")
        self._finish()

    def _finish(self) -> None:
        """After a response: close, or parse the next pipelined request soon."""
        self.busy = False
        if not self.keep_alive:
            self.close()
        elif self.buf:
            self.loop.call_soon(self._parse)

    def close(self) -> None:
        """Close gracefully (pending writes are flushed)."""
        self.stream = None
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def reset(self) -> None:
        """Close with a TCP RST: SO_LINGER 0, then abort."""
        self.stream = None
        if self.transport is None or self.closed:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self.transport.abort()
        self.closed = True
