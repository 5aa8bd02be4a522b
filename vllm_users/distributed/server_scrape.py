"""The master's scrapes of the server's /metrics after the drain, each paired with the sampler's scrape from before
the load (the first line of its server_metrics file): the HTTP side of vllm_users.measure.server_counters, which
only computes on the two snapshots.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.request
from collections.abc import Callable, Mapping

from vllm_users.client import stdlib_http
from vllm_users.measure.server_counters import LoadCounters, parse_metrics
from vllm_users.run_dir import SERVER_METRICS, server_metrics_name

__all__ = ["SCRAPE_TIMEOUT_S", "around_load", "around_load_more", "scrape"]

SCRAPE_TIMEOUT_S = 5.0


def scrape(
    url: str, timeout: float = SCRAPE_TIMEOUT_S, headers: Mapping[str, str] | None = None
) -> dict[str, float] | None:
    """One scrape of `url` (with `headers`: its credentials) as parse_metrics' dict; None when it fails (refused,
    HTTP error, not Prometheus)."""
    try:
        req = urllib.request.Request(url, headers={"Accept": "text/plain", **(headers or {})})
        with stdlib_http.urlopen(req, timeout=timeout) as resp:  # interim 1xx responses skipped
            return parse_metrics(resp.read().decode("utf-8", "replace"))
    except (OSError, ValueError, http.client.HTTPException):
        return None


def around_load(
    results_dir: str, timeout: float = SCRAPE_TIMEOUT_S, headers: Mapping[str, str] | None = None
) -> LoadCounters | None:
    """The sampler's scrape before the load (server_metrics.jsonl's first line) and one scrape of its URL now (with
    `headers`, the sampler's: the file never holds them); None when the run sampled no metrics
    (--no-server-metrics), that scrape failed, or this one does."""
    return _around(os.path.join(results_dir, SERVER_METRICS), timeout, lambda url: headers)


def around_load_more(
    results_dir: str,
    timeout: float = SCRAPE_TIMEOUT_S,
    headers: Mapping[str, Mapping[str, str]] | None = None,
) -> list[LoadCounters]:
    """around_load of every further --server-metrics URL (server_metrics.1.jsonl, ...), in their order, each
    scraped with its own `headers[url]`; the URLs without a baseline or whose scrape fails now are left out."""
    out: list[LoadCounters] = []
    for i in range(1, 1000):  # bounded: a run has as many files as --server-metrics URLs
        path = os.path.join(results_dir, server_metrics_name(i))
        if not os.path.exists(path):
            break
        got = _around(path, timeout, lambda url: (headers or {}).get(url))
        if got is not None:
            out.append(got)
    return out


def _around(
    path: str, timeout: float, headers_of: Callable[[str], Mapping[str, str] | None]
) -> LoadCounters | None:
    """The baseline in `path`'s first line and a scrape of its URL now."""
    try:
        with open(path, "rb") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError):
        return None
    if not isinstance(first, dict) or not isinstance(first.get("v"), dict) or not first.get("url"):
        return None  # no baseline from before the load: a later sample would undercount
    url = str(first["url"])
    after = scrape(url, timeout, headers_of(url))
    return None if after is None else LoadCounters(url, dict(first["v"]), after)
