"""The standard library's HTTP clients (http.client, urllib) for everything off the hot path: the preflight,
the /metrics scrape, the profiler calls. Theirs, with one change: every interim 1xx response before the final
one is skipped (RFC 9110 §15.2). http.client skips only `100 Continue`; a `103 Early Hints` (sent by CDNs and
proxies in front of a server) came back as the response, with an empty body.
101 Switching Protocols is no interim response: it stays the answer.
Their https:// connections all take the process's TLS context (vllm_users/client/tls.py: --ca-bundle,
--insecure, --client-cert), so every path verifies the server's certificate the same way.
"""

from __future__ import annotations

import http.client
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from vllm_users.client import tls

__all__ = [
    "HTTPConnection",
    "HTTPException",
    "HTTPSConnection",
    "InterimSkippingResponse",
    "connect",
    "urlopen",
]

HTTPException = (
    http.client.HTTPException
)  # what a malformed answer raises (beside OSError for the connection's faults)


class InterimSkippingResponse(http.client.HTTPResponse):
    """http.client's response, which reads past interim 1xx responses (their headers, e.g. Link, are dropped)."""

    def begin(self) -> None:
        """Read the status line and headers of the final response."""
        super().begin()  # skips 100 Continue itself
        while 100 <= self.status < 200 and self.status != 101:
            # begin() reads the next status line and headers once `headers` is None again; each interim
            # response is bodyless, so the final one starts right after it
            self.headers = self.msg = None  # type: ignore[assignment]
            super().begin()


class HTTPConnection(http.client.HTTPConnection):
    """http.client.HTTPConnection whose responses skip interim 1xx responses."""

    response_class = InterimSkippingResponse


class HTTPSConnection(http.client.HTTPSConnection):
    """http.client.HTTPSConnection whose responses skip interim 1xx responses; its TLS context is the process's
    (tls.context()) unless one is given."""

    response_class = InterimSkippingResponse

    def __init__(self, host: str, port: int | None = None, *, context: Any = None, **kw: Any) -> None:
        super().__init__(host, port, context=context or tls.context(), **kw)


def connect(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection to `url`'s host and port (https: the process's TLS context) and the URL's path without its
    trailing slash: the prefix of every request path (a server behind a gateway's path)."""
    parts = urlsplit(url)
    cls = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    return cls(parts.hostname or "", parts.port, timeout=timeout), parts.path.rstrip("/")


class _SkipInterim(urllib.request.AbstractHTTPHandler):
    # urllib builds its connections in do_open(http_class, ...): each gets our response class
    def do_open(self, http_class: Any, req: Any, **kw: Any) -> http.client.HTTPResponse:
        def connection(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
            conn: http.client.HTTPConnection = http_class(*args, **kwargs)
            conn.response_class = InterimSkippingResponse
            return conn

        return super().do_open(connection, req, **kw)


class _HTTPHandler(_SkipInterim, urllib.request.HTTPHandler):
    pass


class _HTTPSHandler(_SkipInterim, urllib.request.HTTPSHandler):
    pass


_opener: tuple[Any, urllib.request.OpenerDirector] | None = (
    None  # (the TLS context it was built with, opener)
)


def urlopen(req: str | urllib.request.Request, timeout: float) -> Any:
    """urllib.request.urlopen(req, timeout=timeout), interim 1xx responses skipped, https with tls.context()."""
    global _opener
    ctx = tls.context()
    if _opener is None or _opener[0] is not ctx:  # built on first use, as urlopen's own (proxies from the
        # environment then), and again when the TLS settings change. build_opener leaves out the default handlers
        # these two subclass; the rest (proxies, redirects, HTTPError for a non-2xx status) as urlopen's
        _opener = ctx, urllib.request.build_opener(_HTTPHandler, _HTTPSHandler(context=ctx))
    return _opener[1].open(req, timeout=timeout)
