"""--replicas N: N engines behind one port, each with its own seats; /metrics sums them."""

from __future__ import annotations

import asyncio
import threading
import time

from vllm_sim import probe
from vllm_sim.config import parse_config
from vllm_sim.launch import start_simulator
from vllm_sim.metrics import SimStats
from vllm_sim.replicas import ReplicaSet


def _gauge(url: str, name: str) -> float:
    text = probe.request(url, "/metrics").body.decode()
    rows = [line for line in text.splitlines() if line.startswith(name + "{")]
    assert len(rows) == 1, rows  # one server, its replicas summed
    return float(rows[0].rsplit(" ", 1)[1])


def _long_streams(url: str, n: int) -> list[threading.Thread]:
    body = {"prompt": "x y", "max_tokens": 400, "ignore_eos": True, "stream": True}
    threads = [
        threading.Thread(
            target=probe.request, args=(url, "/v1/completions", body), kwargs={"timeout": 30}, daemon=True
        )
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    return threads


def _steady(url: str) -> tuple[float, float]:
    """(running, waiting) once the streams are admitted (a request is counted waiting for a moment on arrival)."""
    time.sleep(0.6)  # the streams last 2 s (400 tokens of 5 ms)
    return _gauge(url, "vllm:num_requests_running"), _gauge(url, "vllm:num_requests_waiting")


def test_two_replicas_run_twice_the_seats_and_metrics_sum_them() -> None:
    args = ["--max-num-seqs", "2", "--decode-step-ms", "5", "--decode-per-seq-ms", "0"]
    with start_simulator(args) as one:
        _long_streams(one.url, 4)
        assert _steady(one.url) == (2.0, 2.0)  # one engine: 2 run, 2 wait
    with start_simulator([*args, "--replicas", "2"]) as two:
        _long_streams(two.url, 4)
        assert _steady(two.url) == (4.0, 0.0)  # two engines, round-robin: 2 each, none waits


def test_least_loaded_picks_the_emptiest_replica() -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        cfg = parse_config(["--replicas", "3", "--replica-policy", "least-loaded"])
        rs = ReplicaSet(cfg, SimStats("m"))
        rs.engines[0].running.extend([object(), object()])  # type: ignore[list-item]
        rs.engines[1].waiting.append(object())  # type: ignore[arg-type]
        assert rs.pick() == 2
        rs.engines[2].running.extend([object()] * 3)  # type: ignore[list-item]
        assert rs.pick() == 1
        rr = ReplicaSet(parse_config(["--replicas", "3"]), SimStats("m"))
        assert [rr.pick() for _ in range(4)] == [0, 1, 2, 0]
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def test_replicas_are_checked() -> None:
    import pytest

    for bad in (["--replicas", "0"], ["--replicas", "2", "--fixed"], ["--replica-policy", "bogus"]):
        with pytest.raises(SystemExit):
            parse_config(bad)
