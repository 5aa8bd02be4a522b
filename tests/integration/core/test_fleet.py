"""Several --host URLs against three embedded simulators, one of them three times slower: the slow one stands out
in per_endpoint, request shares follow the policy, a session stays on one endpoint, and the preflight names the
endpoint that fails. Bounded: each run is a few seconds of load."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from orchestration.launch.ports import free_port
from vllm_sim.launch import start_simulator

from .helpers import cli

FAST = ["--fixed", "--ttft-ms", "10", "--itl-ms", "5"]
SLOW = ["--fixed", "--ttft-ms", "30", "--itl-ms", "15"]  # 3x the others
LOAD = ["--output-len", "8", "--input-len", "16", "--ignore-eos", "--workers", "2"]


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[str]]:
    """Three simulators' URLs, the slow one last."""
    with start_simulator(FAST) as a, start_simulator(FAST) as b, start_simulator(SLOW) as c:
        yield [a.url, b.url, c.url]


def label(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")


def groups(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    g: dict[str, dict[str, Any]] = res["per_endpoint"]["groups"]
    return g


@pytest.mark.timeout(60)
def test_round_robin_spreads_evenly_and_the_slow_endpoint_stands_out(tmp_path, fleet) -> None:
    r = cli(
        ["--host", ",".join(fleet), "--num-prompts", "60", "--users", "6", *LOAD], str(tmp_path), timeout=50
    )
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    fast1, fast2, slow = (groups(res)[label(u)] for u in fleet)
    assert list(groups(res)) == [label(u) for u in fleet]  # --host's order
    # round-robin in each of two workers: every endpoint gets a third, give or take one request per worker
    assert all(abs(g["completed"] - 20) <= 2 for g in (fast1, fast2, slow)), [
        g["completed"] for g in groups(res).values()
    ]
    assert sum(g["completed"] for g in groups(res).values()) == res["completed"] == 60
    for fast in (fast1, fast2):  # ratios, not absolute times: the slow one's TTFT and TPOT are ~3x
        assert slow["median_ttft_ms"] / fast["median_ttft_ms"] > 2.0
        assert slow["median_tpot_ms"] / fast["median_tpot_ms"] > 2.0
    imb = res["per_endpoint"]["imbalance"]
    assert imb["median_ttft_max"] == label(fleet[2]) and imb["median_ttft_max_over_min"] > 2.0
    assert imb["request_share_max_over_min"] < 1.25
    assert res["meta"]["endpoints"] == [label(u) for u in fleet]
    assert {x["host"] for x in r.records()} == {label(u) for u in fleet}
    assert "Per endpoint" in r.out and "server_served" not in res  # one server's counter is not the fleet's


@pytest.mark.timeout(60)
def test_least_inflight_sends_less_to_the_slow_endpoint(tmp_path, fleet) -> None:
    r = cli(
        [
            "--host",
            ",".join(fleet),
            "--endpoint-policy",
            "least-inflight",
            "--num-prompts",
            "90",
            "--users",
            "6",
            *LOAD,
        ],
        str(tmp_path),
        timeout=50,
    )
    assert r.rc == 0, r.logs()[-3000:]
    fast1, fast2, slow = (groups(r.result)[label(u)] for u in fleet)
    # a request on the slow endpoint stays in flight 3x as long, so the idlest endpoint is more often a fast one
    assert slow["request_share"] < min(fast1["request_share"], fast2["request_share"]), groups(r.result)


@pytest.mark.timeout(60)
def test_a_conversation_stays_on_one_endpoint(tmp_path, fleet) -> None:
    r = cli(
        ["--host", ",".join(fleet), "--scenario", "multi-turn", "--num-turns", "3", "--num-prompts", "30",
         "--users", "4", *LOAD],
        str(tmp_path),
        timeout=50,
    )  # fmt: skip
    assert r.rc == 0, r.logs()[-3000:]
    hosts: dict[int, set[str]] = defaultdict(set)
    for x in r.records():
        hosts[x["session"]].add(x["host"])
    assert len(hosts) >= 8 and all(len(h) == 1 for h in hosts.values()), dict(hosts)
    assert len(set().union(*hosts.values())) == 3  # the sessions themselves are spread


@pytest.mark.timeout(60)
def test_the_preflight_names_the_endpoint_that_fails(tmp_path, fleet) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    key = "s3cret-key-of-the-fleet"
    r = cli(
        ["--host", f"{fleet[0]},{dead}", "--api-key", key, "--num-prompts", "4"], str(tmp_path), timeout=50
    )
    assert r.rc == 3, r.out + r.err
    line = [x for x in r.err.splitlines() if "error:" in x]
    assert len(line) == 1 and f"cannot reach {dead}" in line[0] and key not in r.out + r.err
    # a URL of the list that is no URL: exit 2, one line naming it without its credentials
    bad = cli(
        ["--host", f"{fleet[0]},ftp://user:pw-1234@x:1", "--num-prompts", "4"], str(tmp_path), name="bad"
    )
    assert bad.rc == 2 and "'ftp://x:1'" in bad.err and "pw-1234" not in bad.out + bad.err
