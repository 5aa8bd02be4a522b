"""The simulator's `--scheduling-policy priority`: under overload, the high-priority class waits less."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import numpy as np
import pytest

from vllm_sim.launch import SimProcess, start_simulator

# two seats, ~20 tokens of 10 ms steps each: 40 requests at once queue for ~2 s
ENGINE = [
    "--max-num-seqs",
    "2",
    "--decode-step-ms",
    "10",
    "--decode-per-seq-ms",
    "0",
    "--prefill-tokens-per-s",
    "1000000",
]


def ttft(url: str, priority: int, out: list[float]) -> None:
    """Stream one completion; append the seconds to its first data event."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=60)
    body = {"prompt": "a b c d", "max_tokens": 20, "ignore_eos": True, "stream": True, "priority": priority}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    while True:
        line = r.readline()
        if line.startswith(b"data:") or not line:
            break
    out.append(time.perf_counter() - t0)
    r.read()
    conn.close()


def overload(url: str) -> tuple[list[float], list[float]]:
    """20 low-priority requests, then (while they queue) 20 high-priority ones: their TTFTs."""
    low: list[float] = []
    high: list[float] = []
    threads = [threading.Thread(target=ttft, args=(url, 10, low)) for _ in range(20)]
    for t in threads:
        t.start()
    time.sleep(0.15)  # the low ones are queued (2 seats, ~200 ms each) before any high one arrives
    more = [threading.Thread(target=ttft, args=(url, 0, high)) for _ in range(20)]
    for t in more:
        t.start()
    for t in threads + more:
        t.join(120)
    assert len(low) == len(high) == 20
    return low, high


@pytest.fixture(scope="module")
def priority_sim() -> Iterator[SimProcess]:
    with start_simulator([*ENGINE, "--scheduling-policy", "priority"]) as p:
        yield p
        assert "Traceback" not in p.stderr_text()


def test_high_priority_ttft_p99_is_lower_under_overload(priority_sim: SimProcess) -> None:
    low, high = overload(priority_sim.url)
    p99_low, p99_high = float(np.percentile(low, 99)), float(np.percentile(high, 99))
    # the high ones run after at most the two low ones in their seats; every queued low one waits for all 20
    assert p99_high < p99_low, (p99_high, p99_low)
    assert np.median(high) < np.median(low)


def test_fcfs_serves_in_arrival_order() -> None:
    """The control: the same load without priority scheduling (priority 0 for all) favours the earlier ones."""
    with start_simulator(ENGINE) as p:
        low: list[float] = []
        threads = [threading.Thread(target=ttft, args=(p.url, 0, low)) for _ in range(20)]
        for t in threads:
            t.start()
        time.sleep(0.15)
        late: list[float] = []
        more = [threading.Thread(target=ttft, args=(p.url, 0, late)) for _ in range(20)]
        for t in more:
            t.start()
        for t in threads + more:
            t.join(120)
    # arrival order: the late ones wait for every early one (their TTFT includes the early ones' service)
    assert np.median(late) > np.median(low)
