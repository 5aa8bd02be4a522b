"""Every fault kind is observable on the wire and counted exactly once."""

from __future__ import annotations

import json
import socket
import time

import pytest

from vllm_sim import probe
from vllm_sim.launch import SimProcess, start_simulator

pytestmark = pytest.mark.timeout(60)
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "ignore_eos": True, "stream": True}


def faulty(sim: SimProcess, fault: str, body: dict | None = None, timeout: float = 5.0) -> probe.ProbeResult:
    return probe.request(
        sim.url, "/v1/chat/completions", body or BODY, headers={"X-Sim-Fault": fault}, timeout=timeout
    )


def content_events(r: probe.ProbeResult) -> int:
    n = 0
    for _, ev in r.events:
        if b'"content":"' in ev and b'"role"' not in ev:
            n += 1
    return n


def faults_injected(sim: SimProcess) -> dict[str, int]:
    return probe.request(sim.url, "/sim/stats").json()["faults_injected"]


def test_500_and_429(sim: SimProcess) -> None:
    r = faulty(sim, "500")
    assert r.status == 500 and r.json()["error"]["code"] == 500
    r = faulty(sim, "429")
    assert r.status == 429 and r.headers["retry-after"] == "1"


def test_close_mid_stream_without_done(sim: SimProcess) -> None:
    r = faulty(sim, "close:3")
    assert r.status == 200 and not r.complete and r.error == "closed mid-body"
    assert content_events(r) == 3 and b"[DONE]" not in r.body


def test_torn_line(sim: SimProcess) -> None:
    r = faulty(sim, "torn:2")
    assert not r.complete and content_events(r) == 2
    tail = r.body.rsplit(b"\n\n", 1)[-1]
    assert tail.startswith(b"data: {") and not tail.endswith(b"}")


def test_reset(sim: SimProcess) -> None:
    r = faulty(sim, "reset:2")
    assert not r.complete and r.error.startswith("reset"), r.error


def test_inband_error(sim: SimProcess) -> None:
    r = faulty(sim, "inband_error:2")
    assert r.status == 200 and r.complete
    d = r.data()
    assert d[-1] == "[DONE]" and d[-2]["error"]["code"] == 500 and content_events(r) == 2


def test_stall(sim: SimProcess) -> None:
    r = faulty(sim, "stall:2:300")
    assert r.complete
    times = [t for t, ev in r.events if b'"content":"' in ev and b'"role"' not in ev]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) > 0.25 and gaps.index(max(gaps)) == 1


def test_delay_headers(sim: SimProcess) -> None:
    r = faulty(sim, "delay_headers:300")
    assert r.complete and r.headers_at - r.start > 0.25


def test_usage_only_and_zero_tokens(sim: SimProcess) -> None:
    body = {**BODY, "stream_options": {"include_usage": True}}
    d = faulty(sim, "usage_only", body).data()
    assert len(d) == 2 and d[0]["choices"] == [] and d[0]["usage"]["completion_tokens"] == 0
    d = faulty(sim, "zero_tokens", body).data()
    assert [list(e["choices"][0]["delta"]) if e != "[DONE]" and e["choices"] else None for e in d] == [
        ["role", "content"],
        [],
        None,
        None,
    ]
    assert d[1]["choices"][0]["finish_reason"] == "stop"


def test_hang_keeps_connection_silent(sim: SimProcess) -> None:
    r = faulty(sim, "hang:2", timeout=0.6)
    assert r.error == "timeout" and content_events(r) == 2


def test_bad_fault_header_is_400(sim: SimProcess) -> None:
    assert faulty(sim, "explode").status == 400


def test_faults_are_counted(sim: SimProcess) -> None:
    before = faults_injected(sim)
    faulty(sim, "close:1")
    faulty(sim, "close:50")  # K beyond the stream: never injected, not counted
    after = faults_injected(sim)
    assert after.get("close", 0) - before.get("close", 0) == 1
    metrics = probe.request(sim.url, "/metrics").body.decode()
    assert 'sim:faults_injected_total{kind="close",model_name="sim-model"}' in metrics


def test_global_rates_are_seeded_and_counted() -> None:
    args = [
        "--fixed",
        "--ttft-ms",
        "1",
        "--itl-ms",
        "1",
        "--fault-rate-500",
        "0.3",
        "--fault-rate-429",
        "0.2",
        "--seed",
        "7",
    ]
    runs = []
    for _ in range(2):
        with start_simulator(args) as p:
            statuses = [
                probe.request(p.url, "/v1/completions", {"prompt": "x", "max_tokens": 2}).status
                for _ in range(60)
            ]
            stats = probe.request(p.url, "/sim/stats").json()
            assert stats["faults_injected"].get("500", 0) == statuses.count(500)
            assert stats["faults_injected"].get("429", 0) == statuses.count(429)
            runs.append(statuses)
    assert runs[0] == runs[1]
    assert 5 < runs[0].count(500) < 30 and 2 < runs[0].count(429) < 25


def test_control_down_and_stall() -> None:
    with start_simulator(["--fixed", "--ttft-ms", "1", "--itl-ms", "1", "--enable-control"]) as p:
        r = probe.request(p.url, "/sim/control", {"down_for_s": 1.0})
        assert r.json()["ok"]
        time.sleep(0.2)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", p.port), timeout=1).close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", p.port), timeout=1).close()
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        assert probe.request(p.url, "/health").status == 200
        probe.request(p.url, "/sim/control", {"stall_for_s": 0.5})
        t0 = time.perf_counter()
        r = probe.request(p.url, "/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True})
        assert r.complete and time.perf_counter() - t0 > 0.4
    with start_simulator(["--fixed"]) as p:  # without --enable-control the endpoint does not exist
        assert probe.request(p.url, "/sim/control", json.loads('{"down_for_s": 1}')).status == 404
