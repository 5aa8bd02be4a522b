"""The bounded probe of a real server: a small direct client (one thread per stream) that times TTFT and TPOT of
streamed completions, scrapes /metrics, and never runs past its deadline. It talks through the project's HTTP
client for everything off the hot path (vllm_users.client.stdlib_http: interim 1xx answers such as 103 Early Hints
skipped, the process's TLS context) with the headers every request of a run carries (vllm_users.redact).

A direct client rather than `vllm-locust run` steps: a probe point is a handful of requests started at the same
instant (a batch of exactly c sequences), which a Locust run cannot promise, and it costs no process start-up out
of a budget of a few minutes. Every request carries the socket timeout left until the deadline, so the budget is
a hard bound: what runs past it is cut and counted as cut, never waited for.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_users.client import stdlib_http
from vllm_users.redact import connection_headers
from vllm_users.workload.prompts import VOCAB

if TYPE_CHECKING:
    import http.client

__all__ = ["Budget", "Probe", "Shot", "decoding_together", "metric_sum", "parse_metrics", "scrape"]


class Budget:
    """The probe's deadline (monotonic seconds); `left()` is what any request may still take."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + seconds

    def left(self) -> float:
        """Seconds until the deadline (never below 0)."""
        return max(0.0, self.deadline - time.monotonic())

    def elapsed(self) -> float:
        """Seconds since the probe started."""
        return time.monotonic() - self.start


@dataclass
class Shot:
    """One probe request: what was asked, what came back and when (seconds; None when it did not happen)."""

    prompt_tokens: int | None
    max_tokens: int
    output_tokens: int = 0
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    error: str | None = None
    started: float = 0.0
    tokens_seen: int = 0  # live: tokens read so far (the saturation phase counts KV held from it)
    done: bool = False
    words: int = 0
    times: list[float] | None = None  # each token's arrival (perf_counter), when asked for (the batch phase)


@dataclass
class Probe:
    """A client of one server: streamed /v1/completions with ignore_eos, so the output length is what is asked."""

    host: str
    model: str
    budget: Budget
    api_key: str | None = None
    seed: int = 0
    tokens_per_word: float = 1.0
    requests: int = 0
    cut: int = 0
    extra_headers: dict[str, str] = field(default_factory=dict)  # --header's (they win over the key's Bearer)
    _rng: random.Random = field(default_factory=random.Random)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)
        # as every other request of a run: the URL's userinfo is Basic auth, below the API key and --header
        self.host, self._headers = connection_headers(self.host, self.extra_headers, self.api_key)

    def _conn(self, timeout: float) -> tuple[http.client.HTTPConnection, str]:
        # stdlib_http's connections skip interim 1xx answers (103 Early Hints from a proxy), and its https ones
        # verify the certificate with the process's TLS settings (tls.py), as the preflight's do
        return stdlib_http.connect(self.host, max(0.05, timeout))

    def headers(self) -> dict[str, str]:
        """Request headers: the URL's userinfo, the API key's Bearer and --header's, as every request of a run."""
        return {"Content-Type": "application/json", **self._headers}

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """GET path: (status, body); (0, b"") when it fails or the budget is spent."""
        t = min(timeout, self.budget.left())
        if t <= 0:
            return 0, b""
        conn, base = self._conn(t)
        try:
            conn.request("GET", base + path, headers=self.headers())
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, stdlib_http.HTTPException):
            return 0, b""
        finally:
            conn.close()

    def prompt(self, tokens: int) -> tuple[str, int]:
        """A prompt of about `tokens` tokens that shares no prefix with any other (its first words are unique)."""
        with self._lock:
            words = max(1, round(tokens / max(self.tokens_per_word, 1e-6)))
            nonce = f"{self._rng.randrange(10**9)} {self._rng.randrange(10**9)}"
            text = nonce + " " + " ".join(self._rng.choices(VOCAB, k=max(1, words - 2)))
        return text, words

    def shot(self, prompt: str, max_tokens: int, words: int = 0, out: Shot | None = None) -> Shot:
        """Send one streamed completion and time it; errors and cut-offs are in `Shot.error`, never raised."""
        s = out or Shot(None, max_tokens)
        s.words = words
        left = self.budget.left()
        if left <= 0:
            s.error, s.done = "budget", True
            return s
        with self._lock:
            self.requests += 1
        body = json.dumps(
            {
                "model": self.model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "stream": True,
                "ignore_eos": True,
                "temperature": 0.0,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        conn, base = self._conn(left)
        first = last = fin = None
        try:
            s.started = time.perf_counter()
            conn.request("POST", base + "/v1/completions", body=body, headers=self.headers())
            resp = conn.getresponse()
            if resp.status != 200:
                s.error = f"HTTP {resp.status}: {resp.read()[:200].decode(errors='replace')}"
                return s
            while True:
                line = resp.readline()
                if not line:
                    break
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                ev = json.loads(line[6:])
                if ev.get("error"):
                    s.error = f"in-stream error: {ev['error']}"
                    break
                choices = ev.get("choices") or []
                if any(c.get("text") for c in choices):
                    last = time.perf_counter()
                    if first is None:
                        first = last
                    if s.times is not None:
                        s.times.append(last)
                    s.tokens_seen += 1
                elif any(c.get("finish_reason") for c in choices):
                    fin = time.perf_counter()
                usage = ev.get("usage")
                if usage:
                    s.prompt_tokens = usage.get("prompt_tokens")
                    s.output_tokens = int(usage.get("completion_tokens") or 0)
        except TimeoutError:
            s.error = "budget"
            with self._lock:
                self.cut += 1
        except (OSError, stdlib_http.HTTPException, ValueError) as e:
            s.error = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
            s.done = True
        if s.error is None and fin is not None and s.output_tokens > s.tokens_seen:
            # the last tokens decoded to no text (bytes of an unfinished UTF-8 character; a random model's greedy
            # first token can be one): the chunk that ends the stream is when they came. Counted as failed, one
            # such answer drops a whole burst of 1-token requests (the API-server phase's)
            last = fin
            first = first if first is not None else fin
        if s.error is None and first is not None and last is not None:
            s.ttft_s = first - s.started
            s.e2e_s = last - s.started
            n = s.output_tokens or s.tokens_seen
            if n > 1:
                s.tpot_s = (last - first) / (n - 1)
        elif s.error is None:
            s.error = "no token came back"
        return s

    def burst(
        self,
        specs: list[tuple[str, int, int]],
        during: Callable[[list[Shot]], None] | None = None,
        times: bool = False,
    ) -> list[Shot]:
        """Start one request per (prompt, max_tokens, words) at the same instant; `during(shots)` runs in this
        thread until they end (the saturation phase scrapes /metrics there); `times`: keep each token's time."""
        shots = [Shot(None, mt, words=w, times=[] if times else None) for _, mt, w in specs]
        threads = [
            threading.Thread(target=self.shot, args=(p, mt, w, s), daemon=True)
            for (p, mt, w), s in zip(specs, shots, strict=True)
        ]
        for t in threads:
            t.start()
        if during is not None:
            during(shots)
        for t in threads:
            t.join(self.budget.left() + 1.0)
        return shots


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text: name -> [(labels, value)] (enough of the format for vLLM's /metrics)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            head, value = line.rsplit(" ", 1)
            v = float(value)
        except ValueError:
            continue
        name, labels = head, {}
        if "{" in head:
            name, rest = head.split("{", 1)
            for part in rest.rstrip("}").split(","):
                if "=" in part:
                    k, val = part.split("=", 1)
                    labels[k.strip()] = val.strip().strip('"')
        out.setdefault(name, []).append((labels, v))
    return out


def metric_sum(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    """The sum of a metric over its label sets (engines), None when the server does not have it."""
    rows = metrics.get(name)
    return sum(v for _, v in rows) if rows else None


def scrape(probe: Probe) -> dict[str, Any] | None:
    """One /metrics scrape: running, waiting, KV usage and the cache config vLLM shows; None when it fails."""
    status, body = probe.get("/metrics", timeout=2.0)
    if status != 200:
        return None
    m = parse_metrics(body.decode(errors="replace"))
    usage = m.get("vllm:kv_cache_usage_perc") or m.get("vllm:gpu_cache_usage_perc")
    info = m.get("vllm:cache_config_info")
    cache: dict[str, str] = info[0][0] if info else {}
    return {
        "t": time.perf_counter(),
        "running": metric_sum(m, "vllm:num_requests_running"),
        "waiting": metric_sum(m, "vllm:num_requests_waiting"),
        "kv_usage": (sum(v for _, v in usage) / len(usage)) if usage else None,
        "num_gpu_blocks": cache.get("num_gpu_blocks"),
        "block_size": cache.get("block_size"),
        "prefix_caching": cache.get("enable_prefix_caching"),
        "prefix_hits": metric_sum(m, "vllm:prefix_cache_hits_total"),
    }


def decoding_together(shots: list[Shot]) -> int | None:
    """How many streams were decoding at once, from the client's own times: for each stream, the streams
    between their first and last token at the middle of its decode (the median over the streams); None
    without two streams that decoded. A /metrics scrape every 0.1 s can miss a fast GPU's whole burst (64 tokens
    in ~0.1 s): it read a batch of 1 for 2-32 streams started together."""
    spans = [
        (s.started + s.ttft_s, s.started + s.e2e_s)
        for s in shots
        if s.error is None and s.ttft_s is not None and s.e2e_s is not None and s.e2e_s > s.ttft_s
    ]
    if len(spans) < 2:
        return None
    counts = sorted(sum(1 for a, b in spans if a <= (lo + hi) / 2 <= b) for lo, hi in spans)
    return counts[len(counts) // 2]
