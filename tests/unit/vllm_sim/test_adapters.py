"""The simulator's LoRA adapters: served names, requests to them, a slow adapter, bad flags."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from vllm_sim.adapters import check_priority, insert_by_priority, parse_lora_modules, parse_slow
from vllm_sim.config import parse_config
from vllm_sim.launch import SimProcess, start_simulator


@pytest.fixture(scope="module")
def lora_sim() -> Iterator[SimProcess]:
    """Fixed mode (TTFT 100 ms, ITL 20 ms), adapters a and b, a 3x slower."""
    with start_simulator(
        ["--fixed", "--ttft-ms", "100", "--itl-ms", "20", "--lora-modules", "a,b", "--slow-adapter", "a:3"]
    ) as p:
        yield p
        assert "Traceback" not in p.stderr_text()


def post(url: str, body: dict) -> tuple[int, bytes, float]:
    """POST a completion; (status, body, seconds to the end of the body)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=30)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    return r.status, raw, time.perf_counter() - t0


def get_models(url: str) -> list[dict]:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=10)
    conn.request("GET", "/v1/models")
    doc = json.loads(conn.getresponse().read())
    conn.close()
    return doc["data"]


def test_models_lists_the_adapters(lora_sim: SimProcess) -> None:
    data = get_models(lora_sim.url)
    assert [m["id"] for m in data] == ["sim-model", "a", "b"]
    assert data[1]["parent"] == "sim-model" and data[1]["root"] == "/adapters/a"


def test_requests_to_adapters_and_unknown_names(lora_sim: SimProcess) -> None:
    body = {"prompt": "hello there", "max_tokens": 10, "ignore_eos": True}
    for model in ("sim-model", "a", "b"):
        status, raw, _ = post(lora_sim.url, {**body, "model": model})
        assert status == 200, raw
        assert json.loads(raw)["model"] == model
    status, raw, _ = post(lora_sim.url, {**body, "model": "c"})
    assert status == 404 and b"does not exist" in raw


def test_slow_adapter_takes_longer(lora_sim: SimProcess) -> None:
    body = {"prompt": "hello there", "max_tokens": 10, "ignore_eos": True}
    _, _, base = post(lora_sim.url, {**body, "model": "b"})  # 100 + 9 x 20 = 280 ms
    _, _, slow = post(lora_sim.url, {**body, "model": "a"})  # x3 = 840 ms
    assert slow > 1.8 * base, (slow, base)
    assert slow > 0.8  # the factor, not noise: 3 x 280 ms less a margin


def test_fcfs_refuses_a_priority(lora_sim: SimProcess) -> None:
    status, raw, _ = post(lora_sim.url, {"prompt": "x", "max_tokens": 2, "priority": 5})
    assert status == 400 and b"Priority scheduling is not enabled" in raw
    status, _, _ = post(lora_sim.url, {"prompt": "x", "max_tokens": 2, "priority": 0})
    assert status == 200
    status, raw, _ = post(lora_sim.url, {"prompt": "x", "max_tokens": 2, "priority": "high"})
    assert status == 400 and b"priority must be an integer" in raw


def test_flags_parsed_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_lora_modules("a=/p/a b=/p/b") == ("a", "b") and parse_lora_modules("a,b") == ("a", "b")
    assert parse_slow("a:2.5", ("a", "b")) == {"a": 2.5}
    for bad in (
        ["--slow-adapter", "x:2"],
        ["--lora-modules", "a", "--slow-adapter", "a:0.5"],
        ["--scheduling-policy", "lifo"],
        ["--lora-modules", "a,a"],
    ):
        with pytest.raises(SystemExit):
            parse_config(bad)
    assert "--slow-adapter" in capsys.readouterr().err
    assert parse_config(["--scheduling-policy", "priority"]).scheduling_policy == "priority"
    assert check_priority(0, "fcfs") is None and check_priority(-1, "priority") is None
    assert check_priority(1, "fcfs") is not None


def test_insert_by_priority_is_stable() -> None:
    from collections import deque

    q: deque = deque()
    for item in [(1, "a"), (0, "b"), (1, "c"), (0, "d"), (-1, "e")]:
        insert_by_priority(q, item, lambda x: x[0])
    assert [x[1] for x in q] == ["e", "b", "d", "a", "c"]


def test_preflight_checks_every_model_name(lora_sim: SimProcess) -> None:
    from orchestration.server.preflight import PreflightError, check_server
    from vllm_users.errors import UsageError

    info = check_server(lora_sim.url, "sim-model:3,a:1,b:1", None, "completions", also=("a",))
    assert info.model == "sim-model" and info.models == ["sim-model", "a", "b"]
    with pytest.raises(PreflightError, match="'c' is not served") as e:
        check_server(lora_sim.url, "sim-model:3,c:1", None, "completions")
    assert "\n" not in str(e.value) and e.value.exit_code == 3
    with pytest.raises(PreflightError, match="'z' is not served"):
        check_server(lora_sim.url, "sim-model", None, "completions", also=("z",))
    with pytest.raises(UsageError):
        check_server(lora_sim.url, "sim-model:0", None, "completions")
    with pytest.raises(PreflightError, match="serves 3 models"):  # no --model: three names, none chosen
        check_server(lora_sim.url, None, None, "completions")
