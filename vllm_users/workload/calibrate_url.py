"""Prompt-length calibration of a server by its URL, with the standard library's HTTP client: `vllm-locust run`'s
preflight, and a plain `locust` master before its test starts (both calibrate once, for every worker).

Probes overlap on CONCURRENCY threads (gevent's, where Locust patched the standard library), each thread keeping
its own keep-alive connection; every probe is cut off at the budget's timeout.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from vllm_users.client import stdlib_http
from vllm_users.workload.calibration import CONCURRENCY, Budget, calibrate_lengths
from vllm_users.workload.prompts import LengthModel

__all__ = ["calibrate_url", "resolve_model"]


class _Poster:
    """post(path, body) against one base URL: a keep-alive connection per thread, the budget's timeout each."""

    def __init__(self, url: str, headers: dict[str, str], budget: Budget) -> None:
        self.url, self.base = url, urlsplit(url).path.rstrip("/")
        self.headers = {"Content-Type": "application/json", **headers}
        self.budget = budget
        self.local = threading.local()
        self.conns: list[http.client.HTTPConnection] = []

    def _conn(self, timeout: float) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self.local, "conn", None)
        if conn is None:
            conn, _ = stdlib_http.connect(self.url, timeout)
            self.local.conn = conn
            self.conns.append(conn)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes] | None:
        """The status and body of POST `path`, or None when it failed or took longer than the budget allows."""
        conn = self._conn(self.budget.timeout())
        try:
            conn.request("POST", self.base + path, body=json.dumps(body).encode(), headers=self.headers)
            resp = conn.getresponse()
            return resp.status, resp.read(1 << 20)
        except (OSError, http.client.HTTPException):  # a timeout is an OSError: the probe is cut off
            conn.close()  # a fresh connection for the next probe (this one may still carry the late answer)
            return None

    def close(self) -> None:
        """Close every thread's connection."""
        for c in self.conns:
            c.close()


def calibrate_url(
    url: str, model: str, chat: bool, headers: dict[str, str] | None = None, budget: Budget | None = None
) -> LengthModel:
    """calibrate_lengths against the server at `url` (`headers`: the API key's and --header's), bounded by
    `budget` (default: calibration.MAX_PROBES and MAX_SECONDS)."""
    budget = budget or Budget(concurrency=CONCURRENCY)
    poster = _Poster(url, headers or {}, budget)
    pool = ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="calibrate")

    def map_(f: Callable[[str], int | None], texts: Iterable[str]) -> Iterator[int | None]:
        return pool.map(f, list(texts))

    try:
        return calibrate_lengths(poster.post, model, chat, map_, budget)
    finally:
        pool.shutdown(wait=True)
        poster.close()


def resolve_model(url: str, headers: dict[str, str] | None = None, timeout: float = 10.0) -> str | None:
    """The one model the server at `url` lists (GET /v1/models), or None when it lists none, several, or fails."""
    conn, base = stdlib_http.connect(url, timeout)
    try:
        conn.request("GET", base + "/v1/models", headers=headers or {})
        resp = conn.getresponse()
        doc = json.loads(resp.read(1 << 20)) if resp.status == 200 else None
        ids = [m["id"] for m in doc["data"]] if isinstance(doc, dict) else []
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
        return None
    finally:
        conn.close()
    return ids[0] if len(ids) == 1 else None
