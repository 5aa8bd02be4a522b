"""Several servers behind one run: `--host URL1,URL2` (or `@FILE`, one URL a line), each endpoint's short label,
and the client-side policy that picks the endpoint of each request (`--endpoint-policy`).

A session (a multi-turn conversation, a trace's session or prefix chain) stays on one endpoint whatever the
policy: its later turns go where its first went, so the server's prefix cache sees the whole conversation. The
`session` policy also places each new session by a hash of its key, so every worker process agrees on it.
"""

from __future__ import annotations

import random
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from urllib.parse import urlsplit

from vllm_users.errors import UsageError
from vllm_users.redact import connection_headers, redact_url

__all__ = [
    "POLICIES",
    "Chooser",
    "endpoint_label",
    "endpoint_labels",
    "host_urls",
    "fleet_connection",
    "primary_host",
    "redact_hosts",
]

POLICIES = ("round-robin", "random", "least-inflight", "session")
STICKY_SESSIONS = 65536  # sessions remembered per process (the oldest forgotten first: bounded memory)


def _read_list(path: str) -> list[str]:
    """The URLs of an `@FILE`: one a line; blank lines and `#` comments skipped."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as e:
        raise UsageError(f"--host @{path}: cannot read it ({e.strerror or e})") from None
    return [s for s in (x.split("#", 1)[0].strip() for x in lines) if s]


def host_urls(text: str) -> list[str]:
    """The URLs of `--host`: comma-separated, or `@FILE`; [] when none. A bad URL is a UsageError of one line
    naming it without its credentials."""
    text = text.strip()
    if not text:
        return []
    urls = _read_list(text[1:]) if text.startswith("@") else [u.strip() for u in text.split(",")]
    if not urls:
        raise UsageError(f"--host {text!r}: the file names no URL")
    seen: dict[str, str] = {}
    for u in urls:
        shown = redact_url(u) if u else "(empty)"
        try:
            parts = urlsplit(u)
            parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError:
            raise UsageError(f"--host {shown!r}: expected a URL like http://127.0.0.1:8000") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--host {shown!r}: expected a URL like http://127.0.0.1:8000")
        label = endpoint_label(u)
        if label in seen:
            raise UsageError(f"--host {shown!r}: {label} is named twice")
        seen[label] = u
    return urls


def endpoint_label(url: str) -> str:
    """An endpoint's short name in records and results: host:port (the scheme's default port spelt out), a path
    after it when the URL has one; never credentials."""
    p = urlsplit(url)
    port = p.port or {"http": 80, "https": 443}.get(p.scheme)
    host = p.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    path = p.path.rstrip("/")
    return f"{host}:{port}{path}"


def endpoint_labels(text: str) -> list[str]:
    """The labels of `--host`'s URLs; [] when it names none or is not a list of URLs (a plain locust's own host)."""
    try:
        return [endpoint_label(u) for u in host_urls(text)]
    except UsageError:
        return []


def redact_hosts(text: str) -> str:
    """`--host`'s text without any URL's credentials (one URL: exactly redact_url's)."""
    urls = [u.strip() for u in text.split(",")] if "," in text else [text]
    return ",".join(redact_url(u) for u in urls)


def primary_host(text: str) -> str:
    """The first URL of `--host` (what takes a single server: the model lookup, prompt calibration); "" when none."""
    return text.split(",", 1)[0].strip() if text and not text.startswith("@") else text


def fleet_connection(
    text: str, explicit: Mapping[str, str] | None = None, api_key: str | None = None
) -> tuple[str, dict[str, str]]:
    """connection_headers over `--host`'s URLs: (the URLs without userinfo, comma-joined; every header a request
    carries). One URL gives exactly connection_headers'. Every endpoint shares one set of headers, so URLs whose
    credentials differ are a UsageError (give them with --header or --api-key)."""
    urls = host_urls(text)
    if len(urls) < 2:
        return connection_headers(urls[0] if urls else text, explicit, api_key)
    clean: list[str] = []
    auths: set[tuple[tuple[str, str], ...]] = set()
    for u in urls:
        c, h = connection_headers(u, explicit, api_key)
        clean.append(c)
        auths.add(tuple(sorted(h.items())))
    if len(auths) > 1:
        raise UsageError(
            "--host: the URLs carry different credentials; give one set with --header or --api-key"
        )
    return ",".join(clean), dict(next(iter(auths)))


class Chooser:
    """Picks each request's endpoint (0..n-1) in one process; a session keeps its first request's endpoint."""

    def __init__(self, n: int, policy: str = "round-robin", seed: int = 0) -> None:
        if policy not in POLICIES:
            raise UsageError(f"--endpoint-policy {policy!r}: expected one of {', '.join(POLICIES)}")
        self.n = n
        self.policy = policy
        self.inflight = [0] * n  # requests in flight per endpoint (least-inflight reads it)
        self._next = 0
        self._rng = random.Random(seed)
        self._sessions: OrderedDict[str, int] = OrderedDict()

    def choose(self, session: str | None = None) -> int:
        """The endpoint of a request of `session` (None: a request of no session)."""
        if self.n == 1:
            return 0
        if session is not None:
            known = self._sessions.get(session)
            if known is not None:
                self._sessions.move_to_end(session)
                return known
        i = self._fresh(session)
        if session is not None:
            self._sessions[session] = i
            if len(self._sessions) > STICKY_SESSIONS:
                self._sessions.popitem(last=False)
        return i

    def _fresh(self, session: str | None) -> int:
        """A new session's (or a lone request's) endpoint by the policy."""
        if self.policy == "session" and session is not None:
            return zlib.crc32(session.encode()) % self.n  # stable over processes and runs
        if self.policy == "random":
            return self._rng.randrange(self.n)
        if self.policy == "least-inflight":
            low = min(self.inflight)
            # ties go round-robin, so an idle fleet still spreads its first requests
            for k in range(self.n):
                i = (self._next + k) % self.n
                if self.inflight[i] == low:
                    self._next = (i + 1) % self.n
                    return i
        i = self._next
        self._next = (i + 1) % self.n
        return i
