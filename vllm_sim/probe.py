"""A tiny blocking HTTP/1.1 client that timestamps every SSE event (for tests and the benchmark).

It reads the raw socket, so what it measures is what the wire carried: no client library buffering.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse


@dataclass
class ProbeResult:
    """What came back: status, headers, SSE events with receive times, and how the body ended."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: list[tuple[float, bytes]] = field(default_factory=list)  # (perf_counter, "data: ..." payload)
    start: float = 0.0
    headers_at: float = 0.0
    complete: bool = False  # body ended as framed (zero-length chunk / full content-length)
    error: str = ""  # connection reset, closed early, timeout

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)

    def data(self) -> list[Any]:
        """Parsed ``data:`` payloads (``[DONE]`` kept as the string)."""
        out = []
        for _, ev in self.events:
            payload = ev[5:].strip() if ev.startswith(b"data:") else ev
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
        return out


def _dechunk(buf: bytearray) -> tuple[bytes, bool, int]:
    """Decode the complete chunks at the front of ``buf``: (data, saw_last_chunk, bytes_consumed)."""
    out = bytearray()
    pos = 0
    while True:
        nl = buf.find(b"\r\n", pos)
        if nl < 0:
            return bytes(out), False, pos
        size = int(bytes(buf[pos:nl]).split(b";")[0], 16)
        if size == 0:
            if len(buf) >= nl + 4:
                return bytes(out), True, nl + 4
            return bytes(out), False, pos
        if len(buf) < nl + 2 + size + 2:
            return bytes(out), False, pos
        out += buf[nl + 2 : nl + 2 + size]
        pos = nl + 2 + size + 2


def request(
    url: str,
    path: str,
    body: Any = None,
    method: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    sock: socket.socket | None = None,
) -> ProbeResult:
    """Send one request and read the whole response, timestamping each SSE event as it arrives."""
    u = urlparse(url)
    raw = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    method = method or ("GET" if body is None else "POST")
    hdrs = {
        "Host": u.netloc,
        "Content-Type": "application/json",
        "Accept-Encoding": "identity",
        **(headers or {}),
    }
    if body is not None:
        hdrs["Content-Length"] = str(len(raw))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    own = sock is None
    s = sock or socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(timeout)
    res = ProbeResult()
    deadline = time.monotonic() + timeout
    res.start = time.perf_counter()
    try:
        s.sendall(head.encode() + raw)
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                res.error = "closed before headers"
                return res
            buf += chunk
        res.headers_at = time.perf_counter()
        end = buf.index(b"\r\n\r\n")
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        res.status = int(lines[0].split()[1])
        for line in lines[1:]:
            k, _, v = line.partition(":")
            res.headers[k.strip().lower()] = v.strip()
        del buf[: end + 4]
        chunked = "chunked" in res.headers.get("transfer-encoding", "")
        length = int(res.headers.get("content-length", "-1"))
        body_acc = bytearray()
        pending = bytearray()  # de-chunked bytes not yet split into events
        now = res.headers_at
        while True:
            if chunked:
                data, last, used = _dechunk(buf)
                del buf[:used]
                body_acc += data
                pending += data
                while b"\n\n" in pending:
                    i = pending.index(b"\n\n")
                    res.events.append((now, bytes(pending[:i])))
                    del pending[: i + 2]
                if last:
                    res.complete = True
                    break
            elif length >= 0 and len(buf) >= length:
                body_acc += buf[:length]
                res.complete = True
                break
            if time.monotonic() > deadline:
                res.error = "timeout"
                break
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError) as e:
                res.error = f"reset: {e}"
                break
            except TimeoutError:
                res.error = "timeout"
                break
            now = time.perf_counter()
            if not chunk:
                res.error = "closed mid-body"
                if not chunked and length < 0:
                    body_acc += buf
                break
            buf += chunk
        res.body = bytes(body_acc)
        return res
    finally:
        if own or res.error or res.headers.get("connection") == "close":
            s.close()
