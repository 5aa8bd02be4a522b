"""Trace readers: each format read from tests/data/traces/ gives the file's own numbers (read independently here
with json/csv), the window and limit cut what they say, sessions and units follow docs/traces.md, and
trace_block_reuse is the infinite prefix cache's hit rate."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from vllm_users.workload.trace import Trace, TraceRequest
from vllm_users.workload.trace_formats import TRACE_FORMATS, detect_format, load_trace, trace_block_reuse

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


def _json_rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def _csv_rows(name: str) -> list[dict[str, str]]:
    with open(DATA / name, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("mooncake.jsonl", "mooncake"),
        ("azure_code.csv", "azure"),
        ("burstgpt.csv", "burstgpt"),
        ("generic.jsonl", "jsonl"),
    ],
)
def test_detect_format(name: str, fmt: str) -> None:
    assert detect_format(str(DATA / name)) == fmt
    assert load_trace(str(DATA / name)).format == fmt  # auto picks it too


def test_formats_named() -> None:
    assert TRACE_FORMATS == (
        "auto",
        "mooncake",
        "azure-lmm",
        "azure",
        "burstgpt",
        "cc-traces",
        "graph",
        "jsonl",
        "records",
    )


def test_mooncake() -> None:
    rows = _json_rows("mooncake.jsonl")
    t = load_trace(str(DATA / "mooncake.jsonl"))
    assert len(t.requests) == len(rows) == 30
    t0 = rows[0]["timestamp"]
    for r, row in zip(t.requests, rows, strict=True):  # the file is in time order
        assert r.offset_s == pytest.approx((row["timestamp"] - t0) / 1000, abs=1e-9)
        assert (r.input_len, r.output_len, r.hash_ids) == (
            row["input_length"],
            row["output_length"],
            tuple(row["hash_ids"]),
        )
        assert r.prompt is None and r.session_id is None
    assert t.duration_s == pytest.approx((rows[-1]["timestamp"] - t0) / 1000)
    assert t.skipped == {} and t.block_size == 512
    assert load_trace(str(DATA / "mooncake.jsonl"), block_size=16).block_size == 16


def _azure_epoch(text: str) -> float:
    base, frac = text.split(".")
    return datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp() + int(
        frac
    ) / 10 ** len(frac)


def test_azure_keeps_every_digit_of_the_time() -> None:
    rows = _csv_rows("azure_code.csv")
    assert list(rows[0]) == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    assert len(rows[0]["TIMESTAMP"].split(".")[1]) == 7  # 100 ns digits, as Azure writes them
    t = load_trace(str(DATA / "azure_code.csv"))
    t0 = _azure_epoch(rows[0]["TIMESTAMP"])
    assert len(t.requests) == len(rows)
    for r, row in zip(t.requests, rows, strict=True):
        assert r.offset_s == pytest.approx(_azure_epoch(row["TIMESTAMP"]) - t0, abs=1e-6)
        assert (r.input_len, r.output_len) == (int(row["ContextTokens"]), int(row["GeneratedTokens"]))
    assert t.requests[1].line == 3  # the CSV's line: the header is line 1


def test_azure_time_forms(tmp_path: Path) -> None:
    f = tmp_path / "az.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,2\n"
        "2023-11-16 18:15:47.0000001,10,2\n2023-11-16 18:15:48,10,2\n"
        "2023-11-16 18:15:49.5+00:00,10,2\n2023-11-16T18:15:50.25Z,10,2\n"
        "2023-11-16 19:15:51.000000+01:00,10,2\n"
    )
    offs = [r.offset_s for r in load_trace(str(f)).requests]
    want = [0.0, 0.3194101, 1.3194100, 2.8194100, 3.5694100, 4.3194100]
    assert offs == pytest.approx(want, abs=5e-7)  # 7 digits: %f refuses them, as µs they are 6.8 s


def test_burstgpt_skips_failed_rows() -> None:
    rows = _csv_rows("burstgpt.csv")
    assert list(rows[0]) == [
        "Timestamp",
        "Model",
        "Request tokens",
        "Response tokens",
        "Total tokens",
        "Log Type",
    ]
    ok = [r for r in rows if r["Response tokens"] != "0"]
    assert len(rows) - len(ok) == 2
    t = load_trace(str(DATA / "burstgpt.csv"))
    assert t.skipped == {"failed": 2}
    assert [(r.input_len, r.output_len) for r in t.requests] == [
        (int(r["Request tokens"]), int(r["Response tokens"])) for r in ok
    ]
    t0 = float(ok[0]["Timestamp"])
    assert [r.offset_s for r in t.requests] == [float(r["Timestamp"]) - t0 for r in ok]
    assert all(r.model is None for r in t.requests)  # BurstGPT's Model is the logged service's, not ours


def test_generic_jsonl() -> None:
    rows = _json_rows("generic.jsonl")
    t = load_trace(str(DATA / "generic.jsonl"))
    assert len(t.requests) == len(rows) == 18
    for r, row in zip(t.requests, rows, strict=True):
        assert r.offset_s == pytest.approx(row["timestamp"] - rows[0]["timestamp"])
        for key in (
            "input_len",
            "output_len",
            "prompt",
            "messages",
            "session_id",
            "turn",
            "think_ms",
            "model",
            "tenant",
            "priority",
            "scenario",
        ):
            assert getattr(r, key) == row.get(key), key
    alice = [r for r in t.requests if r.session_id == "alice"]
    assert [r.turn for r in alice] == [0, 1, 2] and [r.think_ms for r in alice] == [None, 1500, 2000]
    assert [r.think_ms for r in t.requests if r.session_id == "bob"] == [None, 800, 1200.5]


def test_jsonl_timestamp_units(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 1000, "input_len": 5}\n{"timestamp": 3500, "input_len": 5}\n')
    assert load_trace(str(f)).requests[1].offset_s == 2500  # `timestamp` is seconds
    assert load_trace(str(f), timestamp_unit="ms").requests[1].offset_s == pytest.approx(2.5)
    assert load_trace(str(f), timestamp_unit="us").requests[1].offset_s == pytest.approx(0.0025)
    g = tmp_path / "ms.jsonl"
    g.write_text('{"timestamp_ms": 1000, "input_len": 5}\n{"timestamp_ms": 3500, "input_len": 5}\n')
    assert load_trace(str(g)).requests[1].offset_s == pytest.approx(2.5)  # `timestamp_ms` is milliseconds
    m = tmp_path / "m.jsonl"
    m.write_text(
        '{"timestamp": 3, "input_length": 5, "output_length": 1, "hash_ids": []}\n'
        '{"timestamp": 5, "input_length": 5, "output_length": 1, "hash_ids": []}\n'
    )
    assert load_trace(str(m)).requests[1].offset_s == pytest.approx(0.002)  # mooncake: ms
    assert load_trace(str(m), timestamp_unit="s").requests[1].offset_s == 2


def test_unsorted_file_is_sent_in_time_order(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(
        '{"timestamp": 5, "input_len": 1}\n{"timestamp": 2, "input_len": 2}\n'
        '{"timestamp": 2, "input_len": 3}\n{"timestamp": 9, "input_len": 4}\n'
    )
    t = load_trace(str(f))
    assert [(r.offset_s, r.input_len, r.line) for r in t.requests] == [
        (0, 2, 2),
        (0, 3, 3),
        (3, 1, 1),
        (7, 4, 4),
    ]


def test_window_and_limit() -> None:
    rows = _json_rows("mooncake.jsonl")
    raw = [(r["timestamp"] - rows[0]["timestamp"]) / 1000 for r in rows]
    inside = [x for x in raw if 2.0 <= x < 5.0]
    assert 3 < len(inside) < len(raw)
    t = load_trace(str(DATA / "mooncake.jsonl"), start_s=2.0, duration_s=3.0)
    assert [r.offset_s for r in t.requests] == pytest.approx([x - inside[0] for x in inside])
    assert t.requests[0].offset_s == 0.0  # offsets start again at the window's first request
    limited = load_trace(str(DATA / "mooncake.jsonl"), start_s=2.0, duration_s=3.0, limit=2)
    assert [r.line for r in limited.requests] == [r.line for r in t.requests[:2]]
    assert len(load_trace(str(DATA / "mooncake.jsonl"), limit=5).requests) == 5
    tail = load_trace(str(DATA / "mooncake.jsonl"), start_s=5.0)
    assert len(tail.requests) == sum(1 for x in raw if x >= 5.0)


def test_window_keeps_or_cuts_a_session_whole() -> None:
    t = load_trace(
        str(DATA / "generic.jsonl"), start_s=0.5, duration_s=1.0
    )  # alice starts at 0.25, bob at 0.9
    assert {r.session_id for r in t.requests} == {None, "bob"}
    assert [r.turn for r in t.requests if r.session_id == "bob"] == [0, 1, 2]  # its later turns come with it
    assert [r.line for r in t.requests if r.session_id is None] == [
        3,
        5,
    ]  # plain requests at 0.6 and 1.3 only
    assert t.requests[0].offset_s == 0.0 and t.requests[0].line == 3


def test_session_turns_inferred_in_time_order(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(
        '{"timestamp": 3, "session_id": 7, "input_len": 1}\n{"timestamp": 1, "session_id": 7, '
        '"input_len": 2}\n{"timestamp": 2, "session_id": "x", "input_len": 3, "think_ms": 0}\n'
    )
    t = load_trace(str(f))
    assert [(r.session_id, r.turn, r.input_len) for r in t.requests] == [
        ("7", 0, 2),
        ("x", 0, 3),
        ("7", 1, 1),
    ]


def test_block_reuse_is_the_prefix_cache_hit_rate() -> None:
    def req(n: int, ids: tuple[int, ...]) -> TraceRequest:
        return TraceRequest(0.0, input_len=n, output_len=1, hash_ids=ids)

    # blocks of 4: [1,2,3] misses (10 tokens); [1,2] hits 4+4; [1,9,3] hits block 1 only: 9 is new, and a prefix
    # cache cannot reuse block 3 behind it
    trace = Trace("t", "mooncake", [req(10, (1, 2, 3)), req(8, (1, 2)), req(12, (1, 9, 3))], block_size=4)
    assert trace_block_reuse(trace) == pytest.approx(12 / 30)
    last_partial = Trace("t", "mooncake", [req(6, (1, 2)), req(6, (1, 2))], block_size=4)
    assert trace_block_reuse(last_partial) == pytest.approx(6 / 12)  # the last block holds 2 tokens
    assert (
        trace_block_reuse(Trace("t", "azure", [TraceRequest(0.0, input_len=5)])) is None
    )  # no hash ids: absent


def test_block_reuse_of_the_data_file() -> None:
    rows = _json_rows("mooncake.jsonl")
    seen: set[int] = set()
    hit = 0
    for row in rows:
        for i, h in enumerate(row["hash_ids"]):
            if h not in seen:
                break
            hit += min(512, row["input_length"] - 512 * i)
        seen.update(row["hash_ids"])
    want = hit / sum(r["input_length"] for r in rows)
    assert 0.2 < want < 0.8  # the file shares documents: a real reuse figure to check
    assert trace_block_reuse(load_trace(str(DATA / "mooncake.jsonl"))) == pytest.approx(want)


def test_byte_order_mark_and_crlf(tmp_path: Path) -> None:
    f = tmp_path / "w.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"timestamp": 0, "input_len": 5}\r\n{"timestamp": 1.5, "input_len": 6}\r\n')
    assert [(r.offset_s, r.input_len) for r in load_trace(str(f)).requests] == [(0.0, 5), (1.5, 6)]
    c = tmp_path / "w.csv"
    c.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.5,3,4\r\n")
    assert load_trace(str(c)).requests[0].input_len == 3
