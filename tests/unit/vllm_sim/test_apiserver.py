"""--api-server-count: API-server processes with finite CPU in front of the engine. The client's TTFT and TPOT
then hold the API server's share, which the engine's own histograms (queue time, TTFT) leave out."""

from __future__ import annotations

import asyncio
import json
import selectors
import socket
import time
from urllib.parse import urlparse

from vllm_sim import probe
from vllm_sim.apiserver import ApiStage
from vllm_sim.config import parse_config
from vllm_sim.launch import start_simulator

FAST = ["--decode-step-ms", "1", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "1000000"]


def _mean(text: str, name: str) -> float:
    """Mean of a histogram in a Prometheus text page (its _sum / _count)."""
    vals = {}
    for suffix in ("_sum", "_count"):
        rows = [line for line in text.splitlines() if line.startswith(name + suffix + "{")]
        vals[suffix] = float(rows[0].rsplit(" ", 1)[1])
    return vals["_sum"] / vals["_count"]


def _burst(url: str, n: int, max_tokens: int = 2) -> tuple[list[float], list[float]]:
    """n streamed requests sent together on n open connections: (time to each one's first content event, time to
    each one's end), from the moment the burst was sent (bounded by a 30-s deadline)."""
    u = urlparse(url)
    body = json.dumps(
        {"prompt": "a b c", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    ).encode()
    raw = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    socks = [socket.create_connection((u.hostname, u.port)) for _ in range(n)]
    sel = selectors.DefaultSelector()
    bufs = {s.fileno(): b"" for s in socks}
    first: dict[int, float] = {}
    end: dict[int, float] = {}
    try:
        t0 = time.perf_counter()
        for s in socks:
            s.sendall(raw)
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        deadline = t0 + 30
        while len(end) < n and time.perf_counter() < deadline:
            for key, _ in sel.select(timeout=1.0):
                fd = key.fd
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                now = time.perf_counter() - t0
                bufs[fd] += data
                if fd not in first and b'"text"' in bufs[fd]:
                    first[fd] = now
                if b"0\r\n\r\n" in bufs[fd] and b"[DONE]" in bufs[fd]:
                    end[fd] = now
                    sel.unregister(key.fileobj)
                if not data:
                    sel.unregister(key.fileobj)
                    end.setdefault(fd, now)
    finally:
        sel.close()
        for s in socks:
            s.close()
    assert len(first) == n and len(end) == n, (len(first), len(end))
    return list(first.values()), list(end.values())


def _staged(processes: int, n: int, cost_us: int) -> tuple[list[float], str]:
    args = ["--api-server-count", str(processes), "--api-request-cost-us", str(cost_us), *FAST]
    with start_simulator(args) as sim:
        ttfts, _ = _burst(sim.url, n)
        metrics = probe.request(sim.url, "/metrics").body.decode()
        assert "Traceback" not in sim.stderr_text()
    return ttfts, metrics


def test_a_burst_queues_in_one_api_server_not_in_the_engine() -> None:
    """A burst of N requests on one process: each waits for the N requests' CPU (N x cost) before its first chunk,
    while the engine sees them one by one (its queue time and TTFT stay far below); four processes share it."""
    n, cost = 32, 6000
    one, page = _staged(1, n, cost)
    # virtual time: the process is busy N x cost with the burst's requests before any first chunk is written
    assert min(one) >= n * cost / 1e6 - 0.001, min(one)
    assert _mean(page, "vllm:request_queue_time_seconds") < n * cost / 1e6 / 8
    assert _mean(page, "vllm:time_to_first_token_seconds") < n * cost / 1e6 / 8
    four, _ = _staged(4, n, cost)
    assert min(four) >= n / 4 * cost / 1e6 - 0.001
    mean1, mean4 = sum(one) / n, sum(four) / n
    assert mean1 / mean4 > 2.5, (mean1, mean4)  # ~4x smaller: each process carries a quarter of the burst


def test_a_linear_growth_of_the_burst_in_its_size() -> None:
    """Twice the burst, twice the wait: client TTFT grows with N x the cost of a request."""
    small, _ = _staged(1, 10, 8000)
    big, _ = _staged(1, 20, 8000)
    assert min(small) >= 0.079 and min(big) >= 0.159
    assert 1.5 < (sum(big) / 20) / (sum(small) / 10) < 2.6


def test_output_chunks_queue_for_the_api_server_cpu() -> None:
    """8 streams of 20 tokens, 3 ms of API-server CPU per chunk: the client waits for 8 x 20 chunk jobs, the
    engine's end-to-end latency does not."""
    args = ["--api-server-count", "1", "--api-chunk-cost-us", "3000", *FAST]
    with start_simulator(args) as sim:
        _, ends = _burst(sim.url, 8, max_tokens=20)
        page = probe.request(sim.url, "/metrics").body.decode()
    assert max(ends) >= 8 * 20 * 0.003 - 0.001
    assert _mean(page, "vllm:e2e_request_latency_seconds") < 8 * 20 * 0.003 / 4
    assert _mean(page, "vllm:inter_token_latency_seconds") < 0.02


def test_the_process_queue_is_first_come_first_served_on_virtual_time() -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        cfg = parse_config(
            [
                "--api-server-count",
                "2",
                "--api-request-cost-us",
                "1000",
                "--api-prompt-token-cost-us",
                "10",
                "--api-chunk-cost-us",
                "50",
            ]
        )
        stage = ApiStage(loop, cfg)
        now = loop.time()
        loop.time = lambda: now  # type: ignore[method-assign]  # a frozen clock: every job queued at one instant
        procs = [stage.process_for() for _ in range(4)]
        assert procs == [0, 1, 0, 1]
        done = [stage.request(p, 100, lambda: None) - now for p in procs]
        # 1 ms + 100 x 10 us = 2 ms each; two per process, one after the other
        assert [round(d * 1e6) for d in done] == [2000, 2000, 4000, 4000]
        chunk = stage.after(0, stage.chunk_s, lambda: None) - now
        assert round(chunk * 1e6) == 4050  # a chunk waits behind the requests already queued on its process
        assert round(stage.busy_s[0] * 1e6) == 4050
        del loop.time  # the real clock again, to run the jobs
        ran: list[int] = []
        stage.after(1, 0.0, ran.append, 1)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert ran == [1]
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def test_without_the_stage_there_is_none() -> None:
    cfg = parse_config([])
    assert cfg.api_server_count == 0
    import pytest

    for bad in (["--api-server-count", "-1"], ["--api-server-count", "1", "--api-chunk-cost-us", "-5"]):
        with pytest.raises(SystemExit):
            parse_config(bad)
