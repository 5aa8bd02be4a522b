"""Stream bodies read by one epoll set inside gevent's hub: no greenlet switch per token.

With one greenlet per stream, every token costs a failed recv, a watcher start and stop, two greenlet
switches and a gevent Timeout. That is about half of a worker's CPU at 256 streams (py-spy, docs/benchmarks.md).
Here, the bodies of all in-flight streams are read by one callback of the hub. The callback wakes when any of
their sockets is readable, reads every ready socket once, and feeds the bytes to that stream's parser. The
user's greenlet sleeps until its response is complete: one switch per request.

Times are unchanged: each read still carries the kernel's receive timestamp (wire.read_stamped). Over TLS the
reactor reads through the connection's SSL object (tls.read_record): a record not yet whole waits for the next
wake-up, and bytes OpenSSL decrypted but not handed out yet (`pending()`: no wake-up comes for them) are read
before the callback returns.
The read timeout (`--stream-timeout`, the socket's timeout) and each stream's deadlines (`--request-timeout`,
`--stall-timeout`: client/deadlines.py) are checked by one periodic timer for all streams, so that a chunk costs
nothing more for them: the timer reads how many output chunks a stream has, and when the last one came.
"""

from __future__ import annotations

import ssl
from time import perf_counter
from typing import Any

from gevent.hub import Waiter, get_hub
from gevent.monkey import get_original

from vllm_users.client import tls
from vllm_users.client.deadlines import NO_LIMITS, Limits
from vllm_users.client.ghc_adapter import HTTPConnectionClosed, response_socket
from vllm_users.client.wire import BLOCK, StampedResponse, read_stamped

_MAX_RECORDS = 64  # TLS: records decrypted per wake-up of one stream at most (a bound: epoll wakes us again)
_CHECK_S = 0.25  # how often silent streams are checked against their read timeout and deadlines
# gevent's monkey patching removes select.epoll (Locust patches every process); the original is what we need
try:
    _epoll: Any = get_original("select", "epoll")
    _EPOLLIN: int = get_original("select", "EPOLLIN")
except AttributeError:  # not Linux
    _epoll, _EPOLLIN = None, 0
HAVE_EPOLL = _epoll is not None


class _Stream:
    __slots__ = (
        "resp",
        "events",
        "raw",
        "ssl",
        "waiter",
        "last_io",
        "silence_s",
        "res",
        "limits",
        "deadline",
        "last_content",
        "seen",
    )

    def __init__(
        self,
        resp: StampedResponse,
        sock: Any,
        events: Any,
        waiter: Waiter,
        now: float,
        res: Any = None,
        limits: Limits = NO_LIMITS,
    ) -> None:
        self.resp = resp
        self.events = events
        self.raw = sock._sock  # the non-blocking stdlib socket under gevent's
        parts = tls.ssl_parts(sock)
        self.ssl = (
            parts[0] if parts is not None else None
        )  # https: the SSL object that decrypts what raw holds
        self.waiter = waiter
        self.last_io = now
        self.silence_s: float | None = sock.timeout
        self.res = res  # the StreamResult its events go into: its chunk times tell when content last came
        self.limits = limits if res is not None else NO_LIMITS
        self.deadline = limits.deadline(res.t0) if res is not None else 0.0
        self.last_content = res.t0 if res is not None else now
        self.seen = 0  # output chunks seen by the last check


class Reactor:
    """One per hub (worker process): reads the bodies of every registered stream."""

    def __init__(self) -> None:
        self.hub = get_hub()
        self.ep = _epoll()
        self.streams: dict[int, _Stream] = {}
        self.io = self.hub.loop.io(self.ep.fileno(), 1)
        self.io.start(self._ready)
        self.timer: Any = None

    def read_body(
        self, resp: StampedResponse, events: Any, now: float, res: Any = None, limits: Limits = NO_LIMITS
    ) -> None:
        """Read `resp`'s body into `events` (an SSE dispatcher) and return when it is complete; raises what
        the read raised (connection closed, parse error, TimeoutError after the socket's timeout), or
        DeadlineExceeded when `res` (the StreamResult `events` fills) passes one of `limits`."""
        if resp.drain_into(events, now):  # the whole body came with the headers
            events.finish(now)
            return
        sock = response_socket(resp)
        if sock is None:
            raise HTTPConnectionClosed("connection closed")
        waiter = Waiter(self.hub)
        st = _Stream(resp, sock, events, waiter, now, res, limits)
        fd = st.raw.fileno()
        self.streams[fd] = st
        self.ep.register(fd, _EPOLLIN)
        if self.timer is None and (st.silence_s is not None or st.limits.any):
            self.timer = self.hub.loop.timer(_CHECK_S, _CHECK_S)
            self.timer.start(self._check_silence)
        try:
            error = waiter.get()
        finally:
            self._forget(fd, st)  # also when this greenlet is killed while it waits
        if error is not None:
            raise error

    def _forget(self, fd: int, st: _Stream) -> None:
        if self.streams.get(fd) is st:
            del self.streams[fd]
            try:
                self.ep.unregister(fd)
            except OSError:  # closed already (the pool dropped the connection): the kernel removed it
                pass
        if not self.streams and self.timer is not None:
            self.timer.stop()
            self.timer = None

    def _done(self, fd: int, st: _Stream, error: BaseException | None) -> None:
        self._forget(fd, st)
        # wake the reader after this batch: its next request must not run inside our loop over ready sockets
        self.hub.loop.run_callback(st.waiter.switch, error)

    def _ready(self) -> None:
        try:
            ready = self.ep.poll(0)
        except InterruptedError:
            return
        for fd, _mask in ready:
            st = self.streams.get(fd)
            if st is not None:
                self._read(fd, st)

    def _read(self, fd: int, st: _Stream) -> None:
        for _ in range(_MAX_RECORDS):  # plain: one read; TLS: until OpenSSL holds no decrypted byte
            if not self._read_once(fd, st) or st.ssl is None or not st.ssl.pending():
                return

    def _read_once(self, fd: int, st: _Stream) -> bool:
        """One read of the stream's socket fed to its parser; False when nothing came or the stream ended."""
        resp = st.resp
        try:
            if st.ssl is not None:
                data, now = tls.read_record(
                    st.ssl, st.raw, BLOCK, resp.kernel, resp.wall_minus_perf, st.last_io
                )
            else:
                data, now = read_stamped(st.raw, BLOCK, resp.kernel, resp.wall_minus_perf)
        except (BlockingIOError, ssl.SSLWantReadError):
            return False
        except Exception as e:  # noqa: BLE001 - any socket error ends this stream, never the reactor
            self._done(fd, st, e)
            return False
        if now < st.last_io:  # stamps follow the byte order; guard against a clock step all the same
            now = st.last_io
        st.last_io = now
        try:
            if data:
                resp.feed(data)
            else:
                resp.end_of_input()  # complete when the close delimits the body; else raises
            if resp.drain_into(st.events, now):
                st.events.finish(now)
                self._done(fd, st, None)
                return False
        except Exception as e:  # noqa: BLE001 - a parse error ends this stream, never the reactor
            self._done(fd, st, e)
            return False
        return bool(data)

    def _check_silence(self) -> None:
        now = perf_counter()
        for fd, st in list(self.streams.items()):
            if st.silence_s is not None and now - st.last_io > st.silence_s:
                self._done(fd, st, TimeoutError("read timed out"))
            elif st.limits.any:
                times = st.res.chunk_times
                n = len(times)
                if n != st.seen:
                    st.seen, st.last_content = n, times[-1]
                err = st.limits.check(now, st.deadline, st.last_content, n)
                if err is not None:
                    self._done(fd, st, err)


_REACTORS: dict[int, Reactor] = {}


def reactor() -> Reactor:
    """The reactor of this thread's hub (created on first use)."""
    key = id(get_hub())
    r = _REACTORS.get(key)
    if r is None:
        r = _REACTORS[key] = Reactor()
    return r
