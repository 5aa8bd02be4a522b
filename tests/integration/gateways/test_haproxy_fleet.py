"""A fleet behind a router: `vllm-locust run` against HAProxy (round-robin) over three simulator processes,
HAProxy naming the server that answered in `X-Served-By` (its `%s` log variable), one simulator slowed on
purpose (3x the others' TTFT and inter-token time). `--replica-header` must split the run into the three
server names with about a third of the requests each, the slowed one standing out in its TTFT and TPOT medians
(its gap over each fast one against the replicas' own engine figures for the same run, never absolute times),
and `--server-metrics` once per replica must give one latency_breakdown entry per URL, in the order given.
Skipped, saying so, where haproxy is not installed."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest

from tests.integration.core.helpers import cli
from tests.integration.gateways.haproxy import HAPROXY, MISSING, haproxy
from vllm_sim.launch import start_simulator

pytestmark = [pytest.mark.timeout(60), pytest.mark.skipif(HAPROXY is None, reason=MISSING)]

N, OUT, USERS = 60, 12, 6
TTFT_MS, ITL_MS, SLOW = 20, 4, 3
SLOW_SERVER = "s2"
# the share of the replicas' own gap (engine TTFT and TPOT means) that the client's per-replica medians must show
STANDS_OUT = 0.5  # HAProxy names its servers s0, s1, s2 in the order of the backends
# without http-no-delay HAProxy corks small writes (MSG_MORE): a stream's events arrive in ~200 ms bursts, the
# client's TTFT takes the whole stream and its TPOT is 0, so the slowed replica's TPOT could not stand out
BACKEND_LINES = ["option http-no-delay", "http-response set-header X-Served-By %s"]


def _sim(seed: int, factor: int) -> list[str]:
    return [
        "--fixed",
        "--ttft-ms",
        str(TTFT_MS * factor),
        "--itl-ms",
        str(ITL_MS * factor),
        "--seed",
        str(seed),
    ]


def slow_stands_out(groups: dict[str, Any], servers: dict[str, Any]) -> list[str]:
    """The slowed replica's client-side medians against each fast one's, judged by the replicas' own engine
    means over the same run: the client's median minus a fast replica's must be at least STANDS_OUT of the gap
    between the two replicas' own figures. The client's overhead (its loop, HAProxy, the network) is the same for
    every replica and cancels in the difference; as a ratio it did not (a busy box: 74 ms against 42 and 37, the
    servers' own 60 and 20). Requests mixed up between the groups give a difference near 0 and fail."""
    misses = []
    slow = groups[SLOW_SERVER]
    for metric, stage in (("median_ttft_ms", "ttft"), ("median_tpot_ms", "tpot")):
        for name, g in groups.items():
            if name == SLOW_SERVER:
                continue
            own = servers[SLOW_SERVER][stage]["engine"]["mean_ms"] - servers[name][stage]["engine"]["mean_ms"]
            seen = slow[metric] - g[metric]
            if not (own > 0 and seen >= STANDS_OUT * own):
                misses.append(
                    f"{metric}: {SLOW_SERVER} - {name} = {seen:.1f} ms, the servers' own gap {own:.1f} ms"
                )
    return misses


def test_replicas_behind_haproxy_are_told_apart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with ExitStack() as stack:
        sims = [stack.enter_context(start_simulator(_sim(i, SLOW if i == 2 else 1))) for i in range(3)]
        url = stack.enter_context(haproxy(str(tmp_path), [s.port for s in sims], BACKEND_LINES))
        metrics = [a for s in sims for a in ("--server-metrics", s.url + "/metrics")]
        r = cli(
            [
                *("--host", url, "--replica-header", "X-Served-By"),
                *("--num-prompts", str(N), "--users", str(USERS), "--workers", "1"),
                *("--output-len", str(OUT), "--input-len", "32", "--ignore-eos"),
                *metrics,
            ],
            str(tmp_path),
            timeout=50,
        )
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == N and res["failed"] == 0, res["errors_by_kind"]
    block = res["per_replica"]
    groups = block["groups"]
    assert sorted(groups) == ["s0", "s1", "s2"] and block["unnamed"] == 0
    assert sum(g["completed"] for g in groups.values()) == N
    for name, g in groups.items():
        # round-robin: a third each, give or take the order the closed-loop users come back in
        assert abs(g["request_share"] - 1 / 3) < 0.1, (name, g["request_share"])
    assert all(g["median_tpot_ms"] > 0 for g in groups.values())  # streamed, not delivered in one burst
    assert "per_endpoint" not in res  # one URL: no per-endpoint block, not one of zeros
    servers = res["latency_breakdown"]["servers"]
    assert [s["url"] for s in servers] == [s.url + "/metrics" for s in sims]
    # each replica's own engine saw its share: the slowed one's engine TTFT stands out there too
    engine = [s["ttft"]["engine"] for s in servers]
    assert sum(e["count"] for e in engine) == N
    assert engine[2]["mean_ms"] >= 2 * max(engine[0]["mean_ms"], engine[1]["mean_ms"])
    print({n: (g["median_ttft_ms"], g["median_tpot_ms"]) for n, g in sorted(groups.items())})
    print([(s["ttft"]["engine"]["mean_ms"], s["tpot"]["engine"]["mean_ms"]) for s in servers])
    misses = slow_stands_out(groups, {f"s{i}": s for i, s in enumerate(servers)})
    assert not misses, misses
    assert block["imbalance"]["median_ttft_max"] == SLOW_SERVER
    assert "Per replica" in r.out
    assert "Traceback" not in r.logs()
