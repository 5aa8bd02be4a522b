"""`vllm-locust run --trace` against the embedded simulator with 2 workers: each request at t0 +
offset / --time-scale on the one global schedule, entry i on worker i mod 2; a mooncake trace's block reuse
reaching the server's prefix cache; sessions closed within (think time after the previous turn completed, the
real answers carried), open across; a run replayed from its records; a bad line refused before any load."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from tests.integration.scenarios.runner import vllm_locust
from vllm_users.exit_codes import CLIENT_BOUND, OK, USAGE
from vllm_users.workload.trace_formats import load_trace, trace_block_reuse

BLOCK = 128  # --trace-block-size: small prompts, many blocks
SIM_BLOCK = 16  # the simulator's KV block (vllm_sim/config.py)
CHAT_TEMPLATE_TOKENS = 7  # the simulator's template around one user message (vllm_sim/tokenizer.py)
GAP_MS = 150  # between requests: each prefill is over before the next request that shares its blocks


def _mooncake(path: Path, n: int = 40, seed: int = 5) -> None:
    """Four prefix chains that most requests extend, each request with 1-2 blocks of its own."""
    rng = random.Random(seed)
    rows, unique = [], 10_000
    for i in range(n):
        chain = [100 * (i % 4) + k for k in range(rng.randint(2, 6))]
        own = list(range(unique, unique + rng.randint(1, 2)))
        unique += len(own)
        ids = chain + own
        rows.append(
            {
                "timestamp": i * GAP_MS,
                "input_length": len(ids) * BLOCK - rng.randint(0, BLOCK - 1),
                "output_length": 4,
                "hash_ids": ids,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _ok(run: Any) -> dict[str, Any]:
    assert run.rc in (OK, CLIENT_BOUND), run.logs()[-3000:]
    res: dict[str, Any] = run.result
    assert res["failed"] == 0
    return res


@pytest.fixture(scope="module")
def mooncake_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    tmp = tmp_path_factory.mktemp("trace")
    trace = tmp / "mooncake.jsonl"
    _mooncake(trace)
    run = vllm_locust(
        tmp,
        "--trace",
        str(trace),
        "--time-scale",
        "1.5",
        "--trace-block-size",
        str(BLOCK),
        "--ignore-eos",
        workers=2,
        name="mooncake",
    )
    return run, trace


@pytest.mark.timeout(300)
def test_each_request_is_sent_at_its_trace_time_by_its_worker(mooncake_run: tuple[Any, Path]) -> None:
    run, path = mooncake_run
    res = _ok(run)
    trace = load_trace(str(path), block_size=BLOCK)
    recs = run.records()
    rep = res["replay"]
    assert (rep["trace_requests"], rep["sent"], rep["not_sent"], rep["all_sent"]) == (40, 40, 0, True)
    by_index = {r["session"]: r for r in recs}
    assert sorted(by_index) == list(range(40))
    t0 = by_index[0]["t_intended"]
    for i, req in enumerate(trace.requests):
        r = by_index[i]
        assert r["t_intended"] - t0 == pytest.approx(req.offset_s / 1.5, abs=1e-6)  # the trace's time, scaled
        assert r["worker"].endswith(f"-w{i % 2}")  # entry i on worker i mod 2
        assert r["input_len"] == req.input_len and r["output_len"] == 4 == r["output_tokens"]
        assert r["prompt_tokens"] == (req.input_len or 0) + CHAT_TEMPLATE_TOKENS  # exact through /tokenize
    lags = sorted(r["t_start"] - r["t_intended"] for r in recs)
    assert rep["lag_ms"]["max"] == pytest.approx(lags[-1] * 1000, abs=1e-3)
    assert lags[0] >= -0.001  # nothing before its time
    assert "Replay fidelity" in run.out and "40 / 40 / 0" in run.out


@pytest.mark.timeout(300)
def test_mooncake_block_reuse_reaches_the_servers_prefix_cache(mooncake_run: tuple[Any, Path]) -> None:
    run, path = mooncake_run
    rep = _ok(run)["replay"]
    trace = load_trace(str(path), block_size=BLOCK)
    reuse = trace_block_reuse(trace)
    assert reuse is not None and reuse > 0.4 and rep["expected_block_reuse"] == pytest.approx(reuse)
    # what the server may differ by, per request: a partly reused simulator block (< 16 tokens), the cut word at
    # the end of a partial block (1 token in the simulator), the template's tokens counted in its queries (7)
    queries = sum(r.input_len or 0 for r in trace.requests) + CHAT_TEMPLATE_TOKENS * len(trace.requests)
    tolerance = len(trace.requests) * (SIM_BLOCK + 1 + CHAT_TEMPLATE_TOKENS) / queries
    assert rep["server_prefix_hit_rate"] == pytest.approx(reuse, abs=tolerance), (rep, tolerance)
    assert abs(rep["reuse_gap_points"]) <= tolerance * 100


@pytest.mark.timeout(300)
def test_a_run_replayed_from_its_records_keeps_its_schedule(
    mooncake_run: tuple[Any, Path], tmp_path: Path
) -> None:
    first, _ = mooncake_run
    again = vllm_locust(
        tmp_path,
        "--trace",
        first.run_dir,
        "--trace-format",
        "records",
        "--ignore-eos",
        workers=2,
        name="again",
    )
    res = _ok(again)
    assert res["replay"]["format"] == "records" and res["replay"]["all_sent"]
    want = sorted(r["t_intended"] for r in first.records())
    got = sorted(r["t_intended"] for r in again.records())
    assert len(got) == len(want)
    for a, b in zip(want, got, strict=True):
        assert b - got[0] == pytest.approx(a - want[0], abs=1e-5)  # the same intended offsets
    assert sorted(r["input_len"] for r in again.records()) == sorted(r["input_len"] for r in first.records())


SESSIONS = [
    {"timestamp": 0.0, "session_id": "a", "turn": 0, "input_len": 40, "output_len": 6},
    {
        "timestamp": 0.1,
        "session_id": "b",
        "turn": 0,
        "prompt": "hello there",
        "output_len": 6,
        "tenant": "api",
    },
    {"timestamp": 0.2, "input_len": 30, "output_len": 6},
    {"timestamp": 0.3, "session_id": "c", "turn": 0, "input_len": 20, "output_len": 6},
    {"timestamp": 1.0, "session_id": "a", "turn": 1, "think_ms": 700, "input_len": 10, "output_len": 6},
    {
        "timestamp": 1.1,
        "session_id": "b",
        "turn": 1,
        "think_ms": 300,
        "prompt": "and then?",
        "output_len": 6,
        "tenant": "api",
    },
    {"timestamp": 1.9, "session_id": "a", "turn": 2, "think_ms": 400, "input_len": 10, "output_len": 6},
    {"timestamp": 2.0, "input_len": 25, "output_len": 6},
]


@pytest.mark.timeout(300)
def test_sessions_stay_on_one_worker_and_wait_for_the_previous_turn(tmp_path: Path) -> None:
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SESSIONS))
    run = vllm_locust(tmp_path, "--trace", str(path), "--ignore-eos", workers=2, name="sessions")
    res = _ok(run)
    recs = run.records()
    assert len(recs) == len(SESSIONS) and res["replay"]["all_sent"]
    by_session: dict[int, list[dict[str, Any]]] = {}
    for r in recs:
        by_session.setdefault(r["session"], []).append(r)
    turns = {s: sorted(rs, key=lambda r: r["turn"]) for s, rs in by_session.items()}
    assert {s: len(t) for s, t in turns.items()} == {0: 3, 1: 2, 2: 1, 3: 1, 7: 1}
    for s, ts in turns.items():
        assert {r["worker"] for r in ts} == {ts[0]["worker"]} and ts[0]["worker"].endswith(f"-w{s % 2}")
        assert ts[0]["t_intended"] is not None and all(r["t_intended"] is None for r in ts[1:])
    think = {(0, 1): 0.7, (0, 2): 0.4, (1, 1): 0.3}
    for (s, k), pause in think.items():
        before, this = turns[s][k - 1], turns[s][k]
        done = before["t_start"] + before["end_us"] / 1e6
        assert this["t_start"] >= done + pause - 0.005  # think_ms after the previous turn completed
        # the history: the earlier prompt and its real answer are in this prompt
        assert this["prompt_tokens"] >= before["prompt_tokens"] + before["output_tokens"]
    assert [r["request_class"] for r in turns[1]] == ["api", "api"]
    assert {"0", "1"} <= set(res["ttft_by_turn"])
    assert os.path.exists(os.path.join(run.run_dir, "result.json"))


@pytest.mark.timeout(120)
def test_a_bad_line_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    bad = Path(__file__).resolve().parents[2] / "data" / "traces" / "bad_field.jsonl"
    run = vllm_locust(tmp_path, "--trace", str(bad), workers=2, name="bad")
    assert run.rc == USAGE
    lines = [ln for ln in run.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "bad_field.jsonl:4" in lines[0] and "input_length" in lines[0], run.err
    assert not os.path.exists(run.run_dir)  # refused before the run directory, the simulator or any request
    clash = vllm_locust(tmp_path, "--trace", str(bad), "--request-rate", "3", name="clash")
    assert clash.rc == USAGE and "--request-rate" in clash.err


MIXED: list[dict[str, Any]] = [  # a line's endpoint and image count
    {"timestamp": 0.0, "input_len": 30, "output_len": 4, "images": 2},
    {"timestamp": 0.1, "input_len": 20, "endpoint": "embeddings"},
    {"timestamp": 0.2, "input_len": 25, "output_len": 5, "endpoint": "responses"},
    {"timestamp": 0.3, "input_len": 30, "output_len": 4, "endpoint": "chat", "images": 1},
    {"timestamp": 0.4, "input_len": 15, "endpoint": "embeddings", "tenant": "search"},
    {"timestamp": 0.5, "input_len": 20, "output_len": 3},
]


@pytest.mark.timeout(300)
def test_each_line_goes_to_its_endpoint_with_its_images(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MIXED))
    run = vllm_locust(tmp_path, "--trace", str(path), "--ignore-eos", workers=1, name="mixed")
    res = _ok(run)
    recs = sorted(run.records(), key=lambda r: r["session"])
    assert len(recs) == len(MIXED)
    for line, r in zip(MIXED, recs, strict=True):
        assert r["error"] is None, r
        assert r["endpoint"] == line.get("endpoint", "chat")
        assert r.get("images") == line.get("images")  # exactly the line's count; none where it gives none
        if r["endpoint"] == "embeddings":
            assert len(r["chunk_times_us"]) == 1 and r["output_tokens"] is None  # the body's end (E2EL) only
            assert r["prompt_tokens"] == line["input_len"]  # no chat template on an embedding input
        else:
            assert r["chunk_times_us"] and r["output_tokens"] == line["output_len"]
    assert recs[4]["request_class"] == "search"
    ttfts = [r["chunk_times_us"][0] / 1000 for r in recs if r["endpoint"] != "embeddings"]
    assert res["mean_ttft_ms"] == pytest.approx(
        sum(ttfts) / len(ttfts), abs=1e-3
    )  # the embeddings' not in it
    search = res["classes"]["per_class"]["search"]  # the embeddings line's tenant: E2EL, no TTFT (absent)
    assert search["p99_e2el_ms"] > 0 and not any("ttft" in k or "tpot" in k for k in search)
    assert search["output_throughput"] is None and "search" in run.out  # the summary prints it (n/a)
    # `trace export` of the run writes each line's endpoint and images back: a replay sends the same
    back = load_trace(run.run_dir)
    assert [(q.endpoint, q.images) for q in back.requests] == [
        (line.get("endpoint", "chat"), line.get("images")) for line in MIXED
    ]


def test_an_exported_json_run_replays_the_tokens_it_produced(tmp_path: Path) -> None:
    """A json-scenario answer stops at its schema's end, far under the max_tokens it was allowed; the export
    writes what each request produced, so its replay (--ignore-eos) against the simulator makes the run's tokens
    (within 5 %), not the allowance (175 against 56.7 a request when the export wrote max_tokens)."""
    run = vllm_locust(tmp_path, "--scenario", "json", "--num-prompts", "30", "--users", "3", name="json")
    assert run.rc == OK, run.err[-2000:]
    out = tmp_path / "json.jsonl"
    from orchestration.cli import main as cli_main

    assert cli_main(["trace", "export", run.run_dir, "-o", str(out)]) == 0
    # --ignore-eos: each line's length exactly (docs/traces.md), as a replay that measures the same work does
    replay = vllm_locust(tmp_path, "--trace", str(out), "--ignore-eos", name="replay")
    assert replay.rc == OK, replay.err[-2000:]

    def tokens(recs: list[dict[str, Any]]) -> float:
        return sum(r["output_tokens"] or 0 for r in recs) / len(recs)

    made, again = tokens(run.records()), tokens(replay.records())
    asked = sum(r["output_len"] for r in run.records()) / len(run.records())
    assert asked > 1.5 * made  # the allowance is far over the answers: the case the export got wrong
    assert again == pytest.approx(made, rel=0.05), (made, again, asked)
