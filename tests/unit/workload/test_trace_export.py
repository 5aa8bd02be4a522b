"""`vllm-locust trace export` writes a run as a jsonl trace whose replay schedule is the run's (offsets to the
microsecond, lengths, sessions with think times, scenarios); `trace info` prints a trace's figures."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

import pytest

from orchestration.cli import main as cli_main
from vllm_users import run_dir
from vllm_users.measure.record import (
    RequestRecord,
    add_images,
    dropped_record,
    epoch,
    interrupted_record,
    read_records,
    record_from_stream,
)
from vllm_users.workload.trace_formats import load_trace

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


@dataclass
class _Outcome:  # a StreamOutcome
    t0: float
    t_end: float
    chunk_times: list[float] = field(default_factory=list)
    status: int = 200
    usage: dict[str, Any] | None = None
    finish_reason: str | None = "length"
    error: str | None = None
    error_detail: str | None = None
    streamed: bool = True
    reasoning_chunks: int = 0
    t_answer: float = 0.0


def _sent(
    worker: str,
    seq: int,
    t0: float,
    dur: float,
    *,
    t_intended: float | None,
    session: int,
    turn: int,
    input_len: int | None = 100,
    output_len: int | None = 20,
    scenario: str = "chat",
    usage: dict[str, Any] | None = None,
) -> RequestRecord:
    out = _Outcome(t0=t0, t_end=t0 + dur, chunk_times=[t0 + dur / 2, t0 + dur], usage=usage)
    return record_from_stream(
        out,
        scenario=scenario,
        worker=worker,
        user=0,
        seq=seq,
        endpoint="chat",
        t_intended=t_intended,
        input_len=input_len,
        output_len=output_len,
        turn=turn,
        session=session,
    )


def _run(tmp_path: Path) -> tuple[str, list[RequestRecord]]:
    """A run directory: open-loop requests on two workers, a 3-turn and a 2-turn session, a dropped arrival, an
    interrupted request and one without a requested length; records written out of time order."""
    p = perf_counter()
    e = epoch(p)
    recs = [
        _sent("w1", 0, p + 0.0012, 0.3, t_intended=e + 0.001, session=0, turn=0),
        _sent("w2", 0, p + 0.5004, 0.2, t_intended=e + 0.5, session=1, turn=0, input_len=333, output_len=7),
        # a tools-like session: the first request on the schedule, the next two after the previous one ended
        _sent(
            "w1", 1, p + 1.1001, 0.4, t_intended=e + 1.1, session=2, turn=0, scenario="tools", output_len=None
        ),
        _sent(
            "w1", 2, p + 1.5301, 0.2, t_intended=None, session=2, turn=1, scenario="tools", output_len=None
        ),
        _sent("w1", 3, p + 1.9, 0.1, t_intended=None, session=2, turn=2, scenario="tools", output_len=None),
        _sent(
            "w2", 1, p + 1.3, 0.25, t_intended=e + 1.2999, session=2, turn=0
        ),  # the same index on w2: its own
        # multi-turn: each turn a ticket of the schedule
        _sent("w2", 2, p + 2.2, 0.3, t_intended=e + 2.2, session=5, turn=0, scenario="multi-turn"),
        _sent("w2", 3, p + 2.9, 0.3, t_intended=e + 2.9, session=5, turn=1, scenario="multi-turn"),
        _sent(
            "w1",
            4,
            p + 2.4,
            0.1,
            t_intended=e + 2.4,
            session=7,
            turn=0,
            input_len=None,
            output_len=None,
            usage={"prompt_tokens": 57, "completion_tokens": 9},
        ),
        dropped_record("w1", 5, e + 2.6),
        interrupted_record(
            scenario="chat",
            worker="w2",
            user=0,
            seq=4,
            endpoint="chat",
            t_intended=e + 3.0,
            input_len=64,
            output_len=16,
            turn=0,
            session=9,
        ),
    ]
    recs[1].request_class = "gold"
    recs[1].model = "lora-a"
    d = tmp_path / "run"
    d.mkdir()
    order = [3, 0, 9, 1, 6, 2, 10, 8, 5, 7, 4]
    Path(run_dir.path(str(d), run_dir.RECORDS)).write_text("".join(recs[i].to_json() + "\n" for i in order))
    return str(d), recs


def _expected(recs: list[RequestRecord]) -> list[tuple[float, int | None, int | None, str]]:
    sent = [r for r in recs if r.error != "dropped"]
    t = [r.t_intended if r.t_intended is not None else r.t_start for r in sent]
    rows = sorted(
        (
            ti - min(t),
            r.input_len if r.input_len is not None else r.prompt_tokens,
            # what a completed request produced; else what it asked for
            r.output_tokens
            if r.error is None and r.output_tokens
            else (r.output_len if r.output_len is not None else r.output_tokens),
            r.scenario,
        )
        for ti, r in zip(t, sent, strict=True)
    )
    return rows


def test_export_round_trip_is_the_runs_schedule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, recs = _run(tmp_path)
    out = tmp_path / "trace.jsonl"
    assert cli_main(["trace", "export", run, "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "10 requests" in said and "(2 sessions)" in said and "skipped: 1 dropped" in said
    trace = load_trace(str(out))
    assert trace.format == "jsonl"
    want = _expected(recs)
    assert len(trace.requests) == len(want) == 10  # every sent request (the interrupted one too), no drop
    for r, (off, inp, outl, scenario) in zip(trace.requests, want, strict=True):
        assert abs(r.offset_s - off) <= 1e-6  # to the microsecond
        assert (r.input_len, r.output_len, r.scenario) == (inp, outl, scenario)
    assert trace.requests[1].tenant == "gold" and trace.requests[1].model == "lora-a"
    # the same run read directly as a records trace gives the same schedule
    direct = load_trace(run)
    assert direct.format == "records" and direct.skipped == {"dropped": 1}
    assert len(direct.requests) == len(trace.requests)
    for a, b in zip(direct.requests, trace.requests, strict=True):
        assert abs(a.offset_s - b.offset_s) <= 1e-6
        assert (a.input_len, a.output_len, a.session_id, a.turn, a.think_ms, a.scenario) == (
            b.input_len,
            b.output_len,
            b.session_id,
            b.turn,
            b.think_ms,
            b.scenario,
        )


def test_export_sessions_turns_and_think_times(tmp_path: Path) -> None:
    run, recs = _run(tmp_path)
    out = tmp_path / "trace.jsonl"
    assert cli_main(["trace", "export", run, "-o", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    by_session: dict[str, list[dict[str, Any]]] = {}
    for d in lines:
        if "session_id" in d:
            by_session.setdefault(d["session_id"], []).append(d)
    assert sorted(by_session) == [
        "w1/2",
        "w2/5",
    ]  # sessions of one request are plain requests; w2's index 2 too
    tools = by_session["w1/2"]
    assert [d["turn"] for d in tools] == [0, 1, 2] and "think_ms" not in tools[0]
    t1, t2, t3 = recs[2], recs[3], recs[4]
    gap1 = (t2.t_start - (t1.t_start + t1.end_us / 1e6)) * 1e3  # from the previous turn's end to this start
    gap2 = (t3.t_start - (t2.t_start + t2.end_us / 1e6)) * 1e3
    assert tools[1]["think_ms"] == pytest.approx(gap1, abs=2e-3) and gap1 == pytest.approx(30, abs=0.01)
    assert tools[2]["think_ms"] == pytest.approx(gap2, abs=2e-3) and gap2 == pytest.approx(169.9, abs=0.01)
    # no max_tokens was asked: the served length (2 chunks, no usage) is what a replay asks for
    assert all(d["scenario"] == "tools" and d["output_len"] == 2 for d in tools)
    mt = by_session["w2/5"]
    assert mt[1]["think_ms"] == pytest.approx(400, abs=0.01)
    back = load_trace(str(out))
    assert [(r.turn, r.think_ms) for r in back.requests if r.session_id == "w1/2"] == [
        (0, None),
        (1, tools[1]["think_ms"]),
        (2, tools[2]["think_ms"]),
    ]


def test_export_to_stdout_and_bad_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = _run(tmp_path)
    assert cli_main(["trace", "export", run, "-o", "-"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 10
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli_main(["trace", "export", str(empty), "-o", str(tmp_path / "t.jsonl")]) == 2
    assert "records.jsonl" in capsys.readouterr().err
    only_drops = tmp_path / "drops"
    only_drops.mkdir()
    Path(run_dir.path(str(only_drops), run_dir.RECORDS)).write_text(
        dropped_record("w1", 0, 1.0).to_json() + "\n"
    )
    assert cli_main(["trace", "export", str(only_drops), "-o", str(tmp_path / "t.jsonl")]) == 2
    assert "no requests (skipped: 1 dropped)" in capsys.readouterr().err
    assert not (tmp_path / "t.jsonl").exists()  # nothing written on an error


def test_export_reads_back_what_read_records_reads(tmp_path: Path) -> None:
    run, _ = _run(tmp_path)
    records, torn = read_records(run_dir.path(run, run_dir.RECORDS))
    assert torn == 0 and len(records) == 11
    with open(run_dir.path(run, run_dir.RECORDS), "a") as fh:
        fh.write('{"scenario": "chat", "wor')  # a torn last line (a killed master): counted, not fatal
    assert load_trace(run).skipped == {"dropped": 1, "unreadable": 1}


def _info(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli_main(["trace", "info", *argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_info_figures(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [json.loads(line) for line in (DATA / "mooncake.jsonl").read_text().splitlines()]
    info = _info(capsys, str(DATA / "mooncake.jsonl"))
    dur = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000
    assert info["requests"] == 30 and info["duration_s"] == pytest.approx(dur)
    assert info["mean_rate_rps"] == pytest.approx(29 / dur)
    ins = [r["input_length"] for r in rows]
    assert info["input_len"]["mean"] == pytest.approx(statistics.mean(ins))
    assert info["input_len"]["p50"] == pytest.approx(statistics.median(ins))
    assert (info["input_len"]["min"], info["input_len"]["max"]) == (min(ins), max(ins))
    assert info["block_size"] == 512 and 0.2 < info["block_reuse"] < 0.8
    assert info["sessions"] == 0 and info["max_turns"] is None and info["skipped"] == {}
    g = _info(capsys, str(DATA / "generic.jsonl"))
    assert (g["sessions"], g["session_requests"], g["max_turns"], g["given_prompts"]) == (2, 6, 3, 5)
    assert g["block_reuse"] is None and g["block_size"] is None  # absent, not 0
    assert g["input_len"]["count"] == 13  # the 5 lines with their own text have no length to count
    b = _info(capsys, str(DATA / "burstgpt.csv"), "--trace-format", "burstgpt", "--num-prompts", "5")
    assert b["requests"] == 5 and b["skipped"] == {"failed": 2}
    w = _info(capsys, str(DATA / "mooncake.jsonl"), "--trace-start", "2", "--trace-duration", "3")
    assert 3 < w["requests"] < 30


def test_info_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["trace", "info", str(DATA / "burstgpt.csv")]) == 0
    out = capsys.readouterr().out
    assert "requests   28\n" in out and "skipped    2 failed\n" in out and "burstgpt" in out
    assert "reuse" not in out  # no hash ids: no reuse line
    assert cli_main(["trace", "info", str(DATA / "mooncake.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "reuse      51.3% of prompt tokens in blocks of 512" in out
    assert "duration   7.277 s, mean rate 3.985 req/s" in out  # 29 gaps over 7.277 s


def _api(
    endpoint: str,
    seq: int,
    t0: float,
    *,
    images: int = 0,
    usage: dict[str, Any] | None = None,
    session: int | None = None,
    turn: int = 0,
    input_len: int | None = 50,
) -> RequestRecord:
    out = _Outcome(
        t0=t0, t_end=t0 + 0.1, chunk_times=[] if endpoint == "embeddings" else [t0 + 0.05], usage=usage
    )
    rec = record_from_stream(
        out,
        scenario="trace",
        worker="w1",
        user=0,
        seq=seq,
        endpoint=endpoint,
        t_intended=None,
        input_len=input_len,
        output_len=None,
        turn=turn,
        session=seq if session is None else session,
    )
    return add_images(rec, images, None)


def _write(tmp_path: Path, recs: list[RequestRecord]) -> str:
    d = tmp_path / "run"
    d.mkdir()
    Path(run_dir.path(str(d), run_dir.RECORDS)).write_text("".join(r.to_json() + "\n" for r in recs))
    return str(d)


def test_export_keeps_each_request_s_endpoint_and_images(tmp_path: Path) -> None:
    p = perf_counter()
    recs = [
        _api("chat", 0, p, images=3),
        _api("embeddings", 1, p + 0.2, usage={"prompt_tokens": 50}),
        _api("responses", 2, p + 0.4),
        _api("rerank", 3, p + 0.6),
        _api("chat", 4, p + 0.8),
    ]
    run = _write(tmp_path, recs)
    out = tmp_path / "trace.jsonl"
    assert cli_main(["trace", "export", run, "-o", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(d["endpoint"], d.get("images")) for d in lines] == [
        ("chat", 3),
        ("embeddings", None),
        ("responses", None),
        ("rerank", None),
        ("chat", None),
    ]
    back = load_trace(str(out))  # what a replay sends: the same endpoints and image counts
    assert [(r.endpoint, r.images) for r in back.requests] == [
        (d["endpoint"], d.get("images")) for d in lines
    ]
    assert [(r.endpoint, r.images) for r in load_trace(run).requests] == [
        (r.endpoint, r.images) for r in back.requests
    ]


def test_a_later_turn_replays_its_new_message_not_its_history(tmp_path: Path) -> None:
    """No length was asked (a --dataset run): turn k's served prompt_tokens hold turns < k and their answers; the
    replay sends that history itself, so the reader asks only for the new message's tokens (at least 1)."""
    p = perf_counter()
    u = [
        {"prompt_tokens": 40, "completion_tokens": 9},
        {"prompt_tokens": 40 + 9 + 25, "completion_tokens": 6},
        {"prompt_tokens": 74 + 6 + 0, "completion_tokens": 3},
    ]
    recs = [
        _api("chat", k, p + k, usage=u[k], session=7, turn=k, input_len=None, images=(2, 2, 3)[k])
        for k in range(3)
    ]
    recs.append(
        _api(
            "chat",
            3,
            p + 5,
            usage={"prompt_tokens": 30, "completion_tokens": 2},
            session=8,
            turn=0,
            input_len=None,
        )
    )
    given = _api(
        "chat", 4, p + 6, usage={"prompt_tokens": 90, "completion_tokens": 2}, session=8, turn=1, input_len=12
    )  # a requested length is the new message's own: kept
    recs.append(given)
    trace = load_trace(_write(tmp_path, recs))
    s7 = [r for r in trace.requests if r.session_id == "w1/7"]
    assert [r.input_len for r in s7] == [40, 25, 1]  # 80 - 74 - 6 = 0 new tokens: floored at 1
    assert [r.images for r in s7] == [2, None, 1]  # the history's images are the history's
    assert [r.input_len for r in trace.requests if r.session_id == "w1/8"] == [30, 12]
