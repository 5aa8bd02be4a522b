"""Sample a server's Prometheus `/metrics` during a run and derive server-side figures from the samples.

The sampler is a daemon thread in the `vllm-locust run` process (not in a Locust greenlet: the CLI
process is not gevent-patched). Each scrape is one JSON line of `server_metrics.jsonl`:
`{"t": epoch_s, "v": {"vllm:num_requests_running": 3.0, "vllm:time_to_first_token_seconds_bucket|0.01": 5.0}}`
or `{"t": epoch_s, "error": "..."}`. The first line, scraped before `start` returns (so before the master starts:
after the preflight, before the first load request), also names the `url`: the master scrapes it again after the
drain, and the counters' increases are the load's (vllm_users.measure.server_counters: server_served).
Series are summed over their labels (engines, models) except gauges that are fractions (KV usage, GPU
utilisation), which are averaged: a sum of percentages is meaningless.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from vllm_users.client import stdlib_http
from vllm_users.measure.server_counters import counter_delta, histogram_stats, parse_metrics, read_samples
from vllm_users.redact import Redactor, header_lines, same_origin, secret_values, split_userinfo
from vllm_users.run_options import ScrapeOptions

if TYPE_CHECKING:
    pass

# the metric names live below vllm_users (its live view reads them too); importable from here as before
from vllm_users.measure import metric_keys as K
from vllm_users.measure.server_metric_names import (
    AVERAGED,
    GEN_TOKENS,
    GPU_UTIL,
    HISTOGRAMS,
    KEPT_PREFIXES,
    KV_USAGE,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_TOKENS,
    RUNNING,
    WAITING,
)
from vllm_users.run_dir import SERVER_METRICS

__all__ = [
    "AVERAGED",
    "GEN_TOKENS",
    "GPU_UTIL",
    "HISTOGRAMS",
    "KEPT_PREFIXES",
    "KV_USAGE",
    "PREEMPTIONS",
    "PREFIX_HITS",
    "PREFIX_QUERIES",
    "PROMPT_TOKENS",
    "RUNNING",
    "SERVER_METRICS_FILE",
    "WAITING",
    "ServerMetricsSampler",
    "histogram_stats",
    "parse_metrics",
    "read_samples",
    "scrape_target",
    "scrape_targets",
    "summarize",
    "summarize_file",
]

SERVER_METRICS_FILE = SERVER_METRICS  # vllm_users.run_dir's name, kept under its old name for callers here


def scrape_target(a: ScrapeOptions, host: str, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The first /metrics URL (without userinfo) and its headers (scrape_targets' first)."""
    return scrape_targets(a, host, headers)[0]


def scrape_targets(
    a: ScrapeOptions, host: str, headers: Mapping[str, str]
) -> list[tuple[str, dict[str, str]]]:
    """Each /metrics URL to sample (every --server-metrics, in its order; default HOST/metrics), without userinfo,
    with its headers: --metrics-header when given, else the run's `headers` (--header, the API key) when that
    /metrics is on the --host's origin, else none; the URL's own userinfo as Basic auth (over the run's
    Authorization; a --metrics-header Authorization wins over it)."""
    given = (a.server_metrics,) if isinstance(a.server_metrics, str) else tuple(a.server_metrics)
    urls = [u for u in given if u] or [host.rstrip("/") + "/metrics"]
    return [_target(raw, a, host, headers) for raw in dict.fromkeys(urls)]


def _target(raw: str, a: ScrapeOptions, host: str, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    url, basic = split_userinfo(raw)
    if a.metrics_header:
        return url, {**basic, **header_lines(a.metrics_header)}
    if same_origin(url, host):  # the run's credentials never go to another server by themselves
        own = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        return url, {**own, **basic}
    return url, basic


class ServerMetricsSampler:
    """A daemon thread scraping URL every `interval` s into `path` (JSONL); never raises into the run."""

    def __init__(
        self,
        url: str,
        path: str,
        interval: float = 2.0,
        timeout: float = 2.0,
        headers: Mapping[str, str] | None = None,
        parse: Callable[[str], dict[str, float]] = parse_metrics,
        what: str = "server metrics",
    ) -> None:
        self.url, basic = split_userinfo(url)
        self._parse = parse  # the server's summed series; a GPU exporter's per GPU (measure.gpu_samples)
        self.what = what  # written in the file's first line: never with its userinfo
        self.headers = {"Accept": "text/plain", **basic, **(headers or {})}
        self._redactor = Redactor(secret_values(self.headers, urls=[url]))
        self.path = path
        self.interval = min(
            max(interval, 1.0), 5.0
        )  # 1-5 s: finer is load on the server, coarser hides peaks
        self.timeout = timeout
        self.samples = 0
        self.errors = 0
        self.last_error: str | None = None
        self.write_error: str | None = (
            None  # the samples file could not be written (a full disk): sampling stopped
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fh: IO[str] | None = None
        self.baseline: dict[str, Any] | None = None  # the scrape before the load (the file's first line)

    def start(self) -> None:
        """Scrape once now (the baseline before the load: the first line, with the URL), then in the background."""
        if self._thread is None:
            self._fh = open(self.path, "a")
            self.baseline = {**self.scrape_once(), "url": self.url}
            self._write(self.baseline)
            self._thread = threading.Thread(target=self._run, name="server-metrics", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Take a final scrape (the deltas need the end state) and stop."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=self.timeout + 2)
        self._thread = None

    def scrape_once(self) -> dict[str, Any]:
        """One scrape as the JSON line's object."""
        t = time.time()
        try:
            req = urllib.request.Request(self.url, headers=self.headers)
            with stdlib_http.urlopen(req, timeout=self.timeout) as resp:  # interim 1xx responses skipped
                body = resp.read().decode("utf-8", "replace")
            return {"t": t, "v": self._parse(body)}
        except urllib.error.HTTPError as e:
            return {"t": t, "error": f"HTTP {e.code}"}
        except (OSError, ValueError) as e:  # refused, timeout, unparseable text
            return {"t": t, "error": self._redactor.text(f"{type(e).__name__}: {e}")[:200]}

    def _write(self, row: dict[str, Any]) -> None:
        assert self._fh is not None
        if "error" in row:
            self.errors += 1
            self.last_error = row["error"]
        else:
            self.samples += 1
        try:
            self._fh.write(json.dumps(row, separators=(",", ":")) + "\n")
            self._fh.flush()
        except OSError as e:  # a full disk: the sampling stops, the run goes on (its records say so)
            self.write_error = self.write_error or f"writing {self.path} failed: {e.strerror or e}"
            self._stop.set()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self._write(self.scrape_once())
            self._write(self.scrape_once())  # the end state, after the drain
        finally:
            assert self._fh is not None
            try:
                self._fh.close()
            except OSError:  # its buffer could not be written: last_error says so
                pass

    def status(self) -> str:
        """One line for the console at the end of a run."""
        if self.write_error:
            return f"{self.what}: sampling stopped: {self.write_error}"
        if self.samples == 0 and self.errors:
            return f"{self.what}: none from {self.url} ({self.last_error}); their figures unavailable"
        return f"{self.what}: {self.samples} samples from {self.url}"


def _first(v: dict[str, float], names: Sequence[str]) -> str | None:
    return next((n for n in names if n in v), None)


def summarize(
    samples: Sequence[dict[str, Any]], client: dict[str, Any] | None = None, *, max_points: int = 600
) -> dict[str, Any]:
    """Server-side figures over the run: cache hit rate, KV peak, queue depth, TTFT/queue time, tokens."""
    if not samples:
        return {"available": False, "reason": "no server metric samples"}
    first, last = samples[0]["v"], samples[-1]["v"]
    names = set().union(*(s["v"].keys() for s in samples))
    vllm = any(n.startswith("vllm:") for n in names)
    out: dict[str, Any] = {
        "available": True,
        "samples": len(samples),
        "span_s": samples[-1]["t"] - samples[0]["t"],
        "vllm_metrics": vllm,
    }
    if not vllm:
        out["reason"] = "no vLLM metric names at /metrics"
    hits, queries = _first(last, PREFIX_HITS), _first(last, PREFIX_QUERIES)
    if hits and queries:
        dq = counter_delta(first, last, queries)
        dh = counter_delta(first, last, hits)
        out["prefix_cache_queries"] = dq
        out["prefix_cache_hits"] = dh
        out["prefix_cache_hit_rate"] = (dh / dq) if dq and dh is not None else None
    kv = _first(last, KV_USAGE)
    series: dict[str, list[float]] = {"t": [s["t"] for s in samples]}
    for key, name in (
        ("running", RUNNING),
        ("waiting", WAITING),
        ("kv_cache_usage", kv),
        ("gpu_util", GPU_UTIL),
    ):
        if name and any(name in s["v"] for s in samples):
            vals = [float(s["v"].get(name, math.nan)) for s in samples]
            series[key] = vals
            finite = [x for x in vals if not math.isnan(x)]
            out[f"{key}_max"] = max(finite)
            out[f"{key}_mean"] = sum(finite) / len(finite)
    if "kv_cache_usage_max" in out:
        out["kv_cache_usage_peak"] = out["kv_cache_usage_max"]
    for key, name in (
        ("generation_tokens", GEN_TOKENS),
        ("prompt_tokens", PROMPT_TOKENS),
        ("preemptions", PREEMPTIONS),
    ):
        d = counter_delta(first, last, name)
        if d is not None:
            out[key] = d
    for key, name in HISTOGRAMS.items():
        st = histogram_stats(first, last, name)
        if st is not None:
            out[f"{key}_ms"] = st
    if client:
        out["vs_client"] = _vs_client(out, client)
    out["timeseries"] = _downsample(series, max_points)
    return out


def _vs_client(server: dict[str, Any], client: dict[str, Any]) -> dict[str, Any]:
    """Client minus server: what network and client overhead add (or tokens the client did not see)."""
    vs: dict[str, Any] = {}
    st = server.get("ttft_ms")
    if st and client.get(K.TTFT.key("mean")) is not None:
        # the means only: the server's percentiles are bucket ranges, and a difference of ranges is no figure
        vs["ttft_mean_diff_ms"] = client[K.TTFT.key("mean")] - st["mean"]
    gen = server.get("generation_tokens")
    if gen is not None and client.get(K.TOTAL_OUTPUT_TOKENS) is not None:
        vs["generation_tokens_server"] = gen
        vs["output_tokens_client"] = client[K.TOTAL_OUTPUT_TOKENS]
        vs["tokens_diff"] = gen - client[K.TOTAL_OUTPUT_TOKENS]
    return vs


def _downsample(series: dict[str, list[float]], max_points: int) -> dict[str, list[float]]:
    n = len(series["t"])
    if n <= max_points:
        return series
    step = math.ceil(n / max_points)
    return {k: v[::step] for k, v in series.items()}


def summarize_file(run_dir: str, client: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """summarize() of a run directory's server_metrics.jsonl; None when the run has no such file."""
    path = os.path.join(run_dir, SERVER_METRICS)
    if not os.path.exists(path):
        return None
    samples, bad = read_samples(path)
    out = summarize(samples, client)
    if bad:
        out["unusable_lines"] = bad
    if not samples and bad:
        out["reason"] = "every scrape of /metrics failed (server without /metrics?)"
    return out
