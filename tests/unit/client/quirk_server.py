"""A raw-socket OpenAI-compatible server with wire quirks, for tests of what the clients accept.

Quirks: interim 1xx responses before every final one (RFC 9110 §15.2: clients skip them), a stream that ends
its chunked body cleanly after finish_reason and usage but without `data: [DONE]`, a body torn without a
finish_reason, a connection closed in the middle of a chunk; and what proxies and gateways do to a stream: JSON
re-serialized with spaces, events split over several `data:` lines, usage on the last output event, the media
type in another case or with parameters, a compressed body, error events and error answers. One handler, written with blocking socket
calls, serves under gevent's StreamServer (unit tests) and under real threads (`serve_threaded`, for a CLI
run in a subprocess).
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\nLink: </a.js>; rel=preload\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
MODEL = "quirk-model"
N_OUT = 4
ERROR_MESSAGE = "upstream overloaded: retry later"


@dataclass
class Quirks:
    """How the server answers (every request on every connection, until changed)."""

    interim: tuple[bytes, ...] = ()  # raw interim responses sent before each final one
    interim_apart: bool = True  # each interim response in its own write (else all with the final head)
    done: bool = True  # the stream ends with `data: [DONE]`
    finish: bool = True  # the last output event carries finish_reason (and a usage event follows)
    end: str = "clean"  # clean: 0-length last chunk | cut: the connection closes inside a chunk
    gap_s: float = 0.01  # after each interim response and SSE event: what follows comes later, as for real
    # what proxies and gateways do to a stream
    spaced: bool = False  # events re-serialized with Python's json.dumps spacing (`"usage": {`)
    multiline: bool = False  # each event's JSON split over several `data:` lines (legal SSE, joined by LF)
    usage_on_last: bool = False  # usage rides on the last output event (no usage-only event)
    content_type: str = "text/event-stream"
    encoding: str = ""  # gzip | deflate | deflate-raw | br: the body compressed (flushed per event), unasked
    # event: OpenAI's `event: error` | data: `data: {"error": {...}}` | json200: a 200 error JSON
    error: str = ""
    error_after: int = (
        0  # the first N streamed answers are whole (the preflight's probe), the error or the pings after
    )
    # faults of gateways and proxies that the client must bound or flag
    n_out: int = N_OUT  # output events per stream, one token's text each
    ping_after: int = -1  # after this many output events: only `: ping` comments, every gap_s, for ping_for_s
    ping_for_s: float = 30.0  # bound of the pings (a test's server never runs forever)
    ping_form: str = ": ping\n\n"  # what a keep-alive is: a comment, an empty event (`\n`), an empty `data:`
    headers_after_s: float = 0.0  # the response's head only after this long
    usage_tokens: int | None = None  # usage.completion_tokens says this instead of n_out
    at_once: bool = False  # the whole answer (head and body) in one write: a buffering proxy
    transfer_coding: str = ""  # e.g. gzip: `Transfer-Encoding: gzip, chunked`, the body gzip-compressed


@dataclass
class QuirkServer:
    """State shared by the handler's connections: the quirks and how many requests came, by path."""

    quirks: Quirks = field(default_factory=Quirks)
    requests: dict[str, int] = field(default_factory=dict)
    streamed: int = 0  # streamed requests answered
    port: int = 0
    sleep: Callable[[float], Any] = time.sleep  # gevent.sleep under gevent's StreamServer

    def handle(self, sock: Any, _addr: Any = None) -> None:
        """Serve one connection: requests in turn, while the answers keep it open."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = sock.makefile("rb")
        try:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = f.readline()
                    if not line:
                        return
                    head += line
                lines = head.split(b"\r\n")
                method, target = lines[0].split()[:2]
                length = next(
                    (int(h.split(b":")[1]) for h in lines if h.lower().startswith(b"content-length")), 0
                )
                body = json.loads(f.read(length) or b"{}")
                path = target.decode().split("?")[0]
                self.requests[path] = self.requests.get(path, 0) + 1
                if not self._answer(sock, method.decode(), path, body):
                    return
        except OSError:
            return
        finally:
            f.close()
            sock.close()

    def _interim(self, sock: Any) -> bytes:
        q = self.quirks
        if q.interim_apart:
            for r in q.interim:
                sock.sendall(r)
                self.sleep(q.gap_s)  # the final response comes later: a client must wait on this socket
            return b""
        return b"".join(q.interim)

    def _answer(self, sock: Any, method: str, path: str, body: dict[str, Any]) -> bool:
        pre = self._interim(sock)
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            if body.get("stream"):
                return self._stream(sock, pre, path == "/v1/chat/completions")
            if self.quirks.headers_after_s:
                self.sleep(self.quirks.headers_after_s)
            doc: dict[str, Any] = {
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "t t"},
                        "text": "t t",
                        "finish_reason": "length",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            }
            return self._json(sock, pre, 200, doc)
        if method == "GET" and path == "/v1/models":
            return self._json(sock, pre, 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        if method == "GET" and path == "/metrics":
            text = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n"
            sock.sendall(
                pre
                + b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                % (len(text), text)
            )
            return True
        if method == "POST" and path in ("/start_profile", "/stop_profile"):
            return self._json(sock, pre, 200, {})
        return self._json(sock, pre, 404, {"error": {"message": "not found"}})

    def _json(self, sock: Any, pre: bytes, status: int, doc: Any) -> bool:
        data = json.dumps(doc).encode()
        reason = b"OK" if status == 200 else b"Not Found"
        sock.sendall(
            pre
            + b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, reason, len(data), data)
        )
        return True

    def _stream(self, sock: Any, pre: bytes, chat: bool) -> bool:
        q = self.quirks
        self.streamed += 1
        error = q.error if self.streamed > q.error_after else ""
        if error == "json200":
            return self._json(
                sock, pre, 200, {"error": {"message": ERROR_MESSAGE, "type": "overloaded", "code": 529}}
            )
        events: list[Any] = []
        n_out = q.n_out
        for i in range(n_out):
            fr = "length" if q.finish and i == n_out - 1 else None
            choice = (
                {"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": fr}
                if chat
                else {"index": 0, "text": f"t{i}", "finish_reason": fr}
            )
            events.append({"id": "q", "choices": [choice]})
        usage = {"prompt_tokens": 3, "completion_tokens": n_out if q.usage_tokens is None else q.usage_tokens}
        if q.finish and q.usage_on_last:
            events[-1]["usage"] = usage
        elif q.finish:
            events.append({"id": "q", "choices": [], "usage": usage})
        if error:  # the answer breaks off after two output events
            events = events[:2]
            if error == "event":
                events.append(("error", {"type": "error", "message": ERROR_MESSAGE}))
            else:
                events.append(
                    {"error": {"message": ERROR_MESSAGE, "type": "InternalServerError", "code": 500}}
                )
        frames = [self._event(e) for e in events]
        if q.done:
            frames.append(b"data: [DONE]\n\n")
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n" % q.content_type.encode()
        )
        if q.encoding:
            head += b"Content-Encoding: %s\r\n" % q.encoding.split("-")[0].encode()
            frames = _compressed(frames, q.encoding)
        if q.transfer_coding and self.streamed > q.error_after:  # a coding under chunked: none was asked for
            head = head.replace(b"chunked", q.transfer_coding.encode() + b", chunked")
            frames = _compressed(frames, q.transfer_coding)
        if q.headers_after_s:
            self.sleep(q.headers_after_s)
        if q.at_once:
            body = b"".join(b"%x\r\n%s\r\n" % (len(f), f) for f in frames)
            sock.sendall(pre + head + b"\r\n" + body + b"0\r\n\r\n")
            return True
        if q.ping_after >= 0 and self.streamed > q.error_after:
            return self._pings(sock, pre + head + b"\r\n", frames[: q.ping_after])
        sock.sendall(pre + head + b"\r\n")
        for fr_ in frames:
            self.sleep(q.gap_s)
            sock.sendall(b"%x\r\n%s\r\n" % (len(fr_), fr_))
        if q.end == "cut":
            sock.sendall(b'40\r\ndata: {"choi')  # a chunk that announces 64 bytes, then the close
            sock.shutdown(socket.SHUT_WR)
            return False
        sock.sendall(b"0\r\n\r\n")
        return True

    def _pings(self, sock: Any, head: bytes, frames: list[bytes]) -> bool:
        """A gateway that keeps the stream alive after a few tokens with keep-alives and nothing else."""
        q = self.quirks
        sock.sendall(head)
        for fr_ in frames:
            self.sleep(q.gap_s)
            sock.sendall(b"%x\r\n%s\r\n" % (len(fr_), fr_))
        ping = q.ping_form.encode()
        end = time.monotonic() + q.ping_for_s
        while time.monotonic() < end:
            self.sleep(q.gap_s)
            sock.sendall(b"%x\r\n%s\r\n" % (len(ping), ping))
        return False

    def _event(self, e: Any) -> bytes:
        """One SSE event, in the quirks' JSON spacing and line layout; ("error", doc) is an `event: error`."""
        name, doc = e if isinstance(e, tuple) else (None, e)
        q = self.quirks
        text = json.dumps(doc) if q.spaced else json.dumps(doc, separators=(",", ":"))  # compact, as vLLM
        if q.multiline:
            text = text.replace(", ", ",\n").replace(',"', ',\n"')
        data = b"".join(b"data: " + line.encode() + b"\n" for line in text.split("\n"))
        return (b"event: %s\n" % name.encode() if name else b"") + data + b"\n"


def _compressed(frames: list[bytes], encoding: str) -> list[bytes]:
    """The frames compressed as one body, flushed after each (a proxy that streams its gzip), the end last."""
    if encoding == "br":
        import brotli

        c: Any = brotli.Compressor()
        out = [c.process(f) + c.flush() for f in frames]
        return [f for f in (*out, c.finish()) if f]
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "deflate-raw": -zlib.MAX_WBITS}[encoding]
    z = zlib.compressobj(6, zlib.DEFLATED, wbits)
    out = [z.compress(f) + z.flush(zlib.Z_SYNC_FLUSH) for f in frames]
    return [f for f in (*out, z.flush()) if f]  # an empty one would end the chunked body


@contextmanager
def serve_gevent() -> Iterator[QuirkServer]:
    """A QuirkServer on 127.0.0.1:0 under gevent's StreamServer (unit tests, in the test's own hub)."""
    import gevent
    from gevent.server import StreamServer

    srv = QuirkServer(sleep=gevent.sleep)
    ss = StreamServer(("127.0.0.1", 0), srv.handle)
    ss.start()
    srv.port = ss.server_port
    try:
        yield srv
    finally:
        ss.stop(timeout=1)


class _Threaded(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextmanager
def serve_threaded(quirks: Quirks) -> Iterator[QuirkServer]:
    """A QuirkServer on 127.0.0.1:0 in threads (for a CLI run in a subprocess); `.port` is its port."""
    srv = QuirkServer(quirks)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            srv.handle(self.request)

    tcp = _Threaded(("127.0.0.1", 0), Handler)
    srv.port = tcp.server_address[1]
    t = threading.Thread(target=tcp.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        tcp.shutdown()
        tcp.server_close()
