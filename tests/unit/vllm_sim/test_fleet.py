"""A fleet behind one port: the router's policies (prefix-aware among them), the replica named in each response,
and each replica's own metrics."""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest

from vllm_sim import probe
from vllm_sim.config import parse_config
from vllm_sim.launch import start_simulator
from vllm_sim.metrics import SimStats
from vllm_sim.replicas import ReplicaSet

FAST = ["--decode-step-ms", "1", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "1000000"]
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def _value(text: str, name: str) -> float:
    """The one sample of ``name`` (summed over label sets) in a Prometheus text page."""
    rows = [line for line in text.splitlines() if line.startswith(name + "{")]
    assert rows, name
    return sum(float(line.rsplit(" ", 1)[1]) for line in rows)


def _workload(prefixes: int, per_prefix: int, seed: int = 3) -> list[tuple[int, str]]:
    """(prefix id, prompt): several long shared prefixes (system prompts), each with its own short question."""
    rng = random.Random(seed)
    heads = [" ".join(rng.choice(WORDS) for _ in range(320)) for _ in range(prefixes)]
    items = [
        (p, f"{heads[p]} question {p} {k} " + " ".join(rng.choice(WORDS) for _ in range(8)))
        for p in range(prefixes)
        for k in range(per_prefix)
    ]
    rng.shuffle(items)
    return items


def _run(
    policy: str, items: list[tuple[int, str]], at_once: int = 4
) -> tuple[float, dict[int, set[int]], str, list[str]]:
    """Send the workload `at_once` at a time (4: the replicas busy, so load counts): (prefix-cache hit rate,
    replicas seen per prefix, /metrics, each replica's own /metrics)."""
    with start_simulator(["--replicas", "4", "--router", policy, *FAST]) as sim:
        seen: dict[int, set[int]] = defaultdict(set)
        served: Counter[int] = Counter()

        def one(i: int, p: int, prompt: str) -> None:
            body = {"prompt": prompt, "max_tokens": 30, "ignore_eos": True, "stream": i % 2 == 0}
            r = probe.request(sim.url, "/v1/completions", body, timeout=30)
            assert r.status == 200, r.body
            replica = int(r.headers["x-sim-replica"])  # streamed and non-streamed alike
            seen[p].add(replica)
            served[replica] += 1

        for w in range(0, len(items), at_once):
            wave = [threading.Thread(target=one, args=(w + j, *items[w + j])) for j in range(at_once)]
            for t in wave:
                t.start()
            for t in wave:
                t.join(30)
        assert sum(served.values()) == len(items)
        text = probe.request(sim.url, "/metrics").body.decode()
        pages = [probe.request(sim.url, f"/metrics?replica={i}").body.decode() for i in range(4)]
        for i, page in enumerate(pages):  # each replica's own page counts what the headers attributed to it
            assert _value(page, "vllm:request_success_total") == served[i]
        assert "Traceback" not in sim.stderr_text()
    rate = _value(text, "vllm:prefix_cache_hits_total") / _value(text, "vllm:prefix_cache_queries_total")
    return rate, seen, text, pages


def test_prefix_routing_keeps_a_prefix_on_one_replica_and_hits_more_than_round_robin() -> None:
    items = _workload(prefixes=3, per_prefix=8)
    _, seen_prefix, text, pages = _run("prefix", items)
    _, seen_rr, _, _ = _run("round-robin", items)
    assert all(len(r) == 1 for r in seen_prefix.values()), (
        seen_prefix
    )  # each system prompt stays on its replica
    assert any(len(r) > 1 for r in seen_rr.values())  # round-robin scatters them
    assert len(set().union(*seen_prefix.values())) >= 2  # a new prefix goes to a less loaded replica
    # the hit rates one request at a time: two requests of one prefix sent together both miss (the first is still in
    # prefill), so how many share a wave would decide the rate by the machine's timing. One at a time: one cold miss
    # per prefix against up to one per prefix and replica, 7 of 8 prompts hit against ~4 of 8
    rate_prefix = _run("prefix", items, at_once=1)[0]
    rate_rr = _run("round-robin", items, at_once=1)[0]
    assert rate_prefix > 0.8 and rate_rr < 0.65 and rate_prefix > rate_rr + 0.2, (rate_prefix, rate_rr)
    # /metrics stays the sum of the replicas' own pages, under the same names
    for name in (
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:generation_tokens_total",
    ):
        assert _value(text, name) == sum(_value(p, name) for p in pages)
    assert _value(text, "vllm:request_success_total") == len(items)


def test_replica_pages_name_what_exists_and_one_engine_names_no_replica() -> None:
    with start_simulator(["--replicas", "2", *FAST]) as sim:
        r = probe.request(sim.url, "/metrics?replica=2")
        assert r.status == 404 and "no replica '2': this server has replicas 0..1" in r.json()["detail"]
        assert probe.request(sim.url, "/sim/stats?replica=1").json()["served"] == 0
    with start_simulator(FAST) as sim:
        r = probe.request(sim.url, "/v1/completions", {"prompt": "a b", "max_tokens": 2, "stream": True})
        assert r.status == 200 and "x-sim-replica" not in r.headers  # nothing to attribute, nothing added
        assert probe.request(sim.url, "/metrics?replica=1").status == 404
        whole = probe.request(sim.url, "/sim/stats").json()
        assert probe.request(sim.url, "/sim/stats?replica=0").json()["served"] == whole["served"] + 1


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    asyncio.set_event_loop(lp)
    yield lp
    lp.close()
    asyncio.set_event_loop(None)


def test_random_is_seeded_and_spreads(loop: asyncio.AbstractEventLoop) -> None:
    picks = [
        ReplicaSet(parse_config(["--replicas", "4", "--router", "random"]), SimStats("m")) for _ in range(2)
    ]
    a, b = ([rs.pick() for _ in range(400)] for rs in picks)
    assert a == b  # the same seed, the same choices
    assert set(Counter(a)) == {0, 1, 2, 3} and max(Counter(a).values()) < 160


def test_prefix_ties_go_to_the_least_loaded(loop: asyncio.AbstractEventLoop) -> None:
    rs = ReplicaSet(
        parse_config(["--replicas", "3", "--router", "prefix", "--block-size", "2"]), SimStats("m")
    )
    rs.engines[0].running.append(object())  # type: ignore[arg-type]
    hashes = [11, 12, 13]
    assert rs._by_prefix(hashes) == 1  # nobody holds it: the least loaded (1 and 2 tie: the lower index)
    rs.engines[1].running.extend([object()] * 5)  # type: ignore[list-item]
    assert rs._by_prefix([11, 12, 99]) == 1  # holds 2 of its blocks: loaded or not, it wins
    assert rs._by_prefix([50]) == 2


def test_router_flags() -> None:
    assert parse_config(["--router", "prefix"]).replica_policy == "prefix"
    assert parse_config(["--replica-policy", "least-inflight"]).replica_policy == "least-loaded"
    assert parse_config([]).replica_policy == "round-robin"
    with pytest.raises(SystemExit):
        parse_config(["--router", "bogus"])


def test_the_sum_keeps_the_servers_own_counts() -> None:
    """A pooling request's prompt tokens are counted by the server, not by a replica: the sum must keep them."""
    with start_simulator(["--replicas", "2", *FAST]) as sim:
        assert probe.request(sim.url, "/v1/embeddings", {"input": "a b c d"}).status == 200
        assert _value(probe.request(sim.url, "/metrics").body.decode(), "vllm:prompt_tokens_total") == 4
