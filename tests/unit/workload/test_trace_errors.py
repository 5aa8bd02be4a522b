"""Every way a trace can be bad is one TraceError (a UsageError: exit 2) naming the file, the line and the field,
raised while loading, before anything could be sent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestration.cli import main as cli_main
from vllm_users.errors import TraceError, UsageError
from vllm_users.options import build
from vllm_users.workload.trace_formats import detect_format, load_trace

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
MOON = '{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [1]}\n'
AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BG = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
J = '{"timestamp": 0, "input_len": 5}\n'

CASES = [  # (file name, content, format, the message after "FILE")
    (
        "m.jsonl",
        MOON + '{"timestamp": 1, "input_length": 0, "output_length": 5, "hash_ids": []}\n',
        "mooncake",
        ":2: field 'input_length': expected a positive integer, got 0",
    ),
    (
        "m.jsonl",
        MOON + '{"timestamp": 1, "output_length": 5, "hash_ids": []}\n',
        "mooncake",
        ":2: field 'input_length': missing",
    ),
    (
        "m.jsonl",
        MOON + '{"input_length": 3, "output_length": 5, "hash_ids": []}\n',
        "mooncake",
        ":2: field 'timestamp': missing",
    ),
    (
        "m.jsonl",
        MOON + '{"timestamp": 1, "input_length": 3, "output_length": 5}\n',
        "mooncake",
        ":2: field 'hash_ids': missing",
    ),
    (
        "m.jsonl",
        MOON + '{"timestamp": 1, "input_length": 3, "output_length": 5, "hash_ids": [1, "2"]}\n',
        "mooncake",
        ":2: field 'hash_ids': expected a list of integers, got [1, \"2\"]",
    ),
    (
        "m.jsonl",
        MOON + '{"timestamp": 1, "input_length": 3, "output_length": 5, "hash_ids": [true]}\n',
        "mooncake",
        ":2: field 'hash_ids': expected a list of integers, got [true]",
    ),
    (
        "m.jsonl",
        MOON + '{"timestamp": -1, "input_length": 3, "output_length": 5, "hash_ids": []}\n',
        "mooncake",
        ":2: field 'timestamp': expected a number >= 0, got -1",
    ),
    (
        "m.jsonl",
        MOON + '{"timestamp": NaN, "input_length": 3, "output_length": 5, "hash_ids": []}\n',
        "mooncake",
        ":2: field 'timestamp': expected a number >= 0, got NaN",
    ),
    (
        "m.jsonl",
        MOON + '{"timestamp": 1, "input_length": 3.5, "output_length": 5, "hash_ids": []}\n',
        "mooncake",
        ":2: field 'input_length': expected a positive integer, got 3.5",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5\n',
        "jsonl",
        ":2: not valid JSON: Expecting ',' delimiter",
    ),
    ("j.jsonl", J + '{"timestamp": 1, "input_len": 5} x\n', "jsonl", ":2: not valid JSON: Extra data"),
    ("j.jsonl", J + "[1, 2]\n", "jsonl", ":2: expected a JSON object, got [1, 2]"),
    ("j.jsonl", J + "  nope\n", "jsonl", ":2: not valid JSON: Expecting value"),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "timestamp_ms": 1000, "input_len": 5}\n',
        "jsonl",
        ":2: field 'timestamp_ms': give 'timestamp' or 'timestamp_ms', not both",
    ),
    ("j.jsonl", J + '{"input_len": 5}\n', "jsonl", ":2: field 'timestamp': missing"),
    (
        "j.jsonl",
        J + '{"timestamp": "1s", "input_len": 5}\n',
        "jsonl",
        ":2: field 'timestamp': expected a number >= 0, got \"1s\"",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "output_len": 5}\n',
        "jsonl",
        ":2: field 'input_len': missing (give 'prompt', 'messages' or 'input_len')",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "prompt": "hi", "input_len": 5}\n',
        "jsonl",
        ":2: field 'input_len': give one of 'prompt', 'messages', 'input_len', not prompt and input_len",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "prompt": ""}\n',
        "jsonl",
        ":2: field 'prompt': expected a non-empty string",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "messages": [{"content": "x"}]}\n',
        "jsonl",
        ":2: field 'messages': expected",
    ),
    ("j.jsonl", J + '{"timestamp": 1, "messages": []}\n', "jsonl", ":2: field 'messages': expected"),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": "abc"}\n',
        "jsonl",
        ":2: field 'input_len': expected a positive integer, got \"abc\"",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "output_len": 0}\n',
        "jsonl",
        ":2: field 'output_len': expected a positive integer, got 0",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "session_id": [1]}\n',
        "jsonl",
        ":2: field 'session_id': expected a string or an integer, got [1]",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "turn": 1}\n',
        "jsonl",
        ":2: field 'turn': only a request of a session (with 'session_id') has one",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "think_ms": 10}\n',
        "jsonl",
        ":2: field 'think_ms': only a request of a session",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "session_id": "a", "turn": 0, "think_ms": -5}\n',
        "jsonl",
        ":2: field 'think_ms': expected a number >= 0, got -5",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "session_id": "a", "turn": -1}\n',
        "jsonl",
        ":2: field 'turn': expected an integer >= 0, got -1",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "priority": "high"}\n',
        "jsonl",
        ":2: field 'priority': expected an integer, got \"high\"",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "model": ""}\n',
        "jsonl",
        ":2: field 'model': expected a non-empty string, got \"\"",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "tenant": 3}\n',
        "jsonl",
        ":2: field 'tenant': expected a non-empty string, got 3",
    ),
    (
        "j.jsonl",
        '{"timestamp": 1, "input_len": 5, "session_id": "a", "turn": 1}\n'
        '{"timestamp": 2, "input_len": 5, "session_id": "a", "turn": 0}\n',
        "jsonl",
        ":2: field 'turn': turn 0 of session 'a' is not after turn 1 (line 1) in time",
    ),
    (
        "j.jsonl",
        '{"timestamp": 1, "input_len": 5, "session_id": "a", "turn": 0}\n'
        '{"timestamp": 2, "input_len": 5, "session_id": "a"}\n',
        "jsonl",
        ":2: field 'turn': missing (other requests of session 'a' have one)",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "endpoint": "embedding"}\n',
        "jsonl",
        ":2: field 'endpoint': expected one of chat|completions|responses|embeddings|rerank|score, got \"embedding\"",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "endpoint": 1}\n',
        "jsonl",
        ":2: field 'endpoint': expected one of chat|completions",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "images": -1}\n',
        "jsonl",
        ":2: field 'images': expected an integer >= 0, got -1",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "images": 1.5}\n',
        "jsonl",
        ":2: field 'images': expected an integer >= 0, got 1.5",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "images": true}\n',
        "jsonl",
        ":2: field 'images': expected an integer >= 0, got true",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "images": 2, "endpoint": "embeddings"}\n',
        "jsonl",
        ":2: field 'images': only a chat request carries images (this line's endpoint is embeddings)",
    ),
    (
        "j.jsonl",
        J + '{"timestamp": 1, "input_len": 5, "images": 1, "endpoint": "responses"}\n',
        "jsonl",
        ":2: field 'images': only a chat request carries images (this line's endpoint is responses)",
    ),
    (
        "a.csv",
        AZ + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47,12x,44\n",
        "azure",
        ":3: field 'ContextTokens': expected an integer >= 0, got \"12x\"",
    ),
    (
        "a.csv",
        AZ + "2023-11-16 18:15:46.6805900,374,44\nyesterday,12,44\n",
        "azure",
        ":3: field 'TIMESTAMP': expected a time like 2023-11-16 18:15:46.6805900, got \"yesterday\"",
    ),
    (
        "a.csv",
        AZ + "2023-11-16 18:15:46.68a,374,44\n",
        "azure",
        ":2: field 'TIMESTAMP': expected a time like",
    ),
    ("a.csv", AZ + "2023-11-16 18:15:46.6805900,374\n", "azure", ":2: expected 3 columns, got 2"),
    (
        "a.csv",
        "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46,1,1\n",
        "azure",
        ":1: missing column 'ContextTokens' (the header has TIMESTAMP, Context, GeneratedTokens)",
    ),
    (
        "b.csv",
        BG + "0,ChatGPT,10,20,30,API log\nsoon,ChatGPT,10,20,30,API log\n",
        "burstgpt",
        ":3: field 'Timestamp': expected a number >= 0, got \"soon\"",
    ),
    (
        "b.csv",
        BG + "0,ChatGPT,10,-20,30,API log\n",
        "burstgpt",
        ":2: field 'Response tokens': expected an integer >= 0, got \"-20\"",
    ),
    (
        "b.csv",
        BG + "0,ChatGPT,10,0,10,API log\n1,GPT-4,5,0,5,API log\n",
        "burstgpt",
        ": the trace has no requests (skipped: 2 failed)",
    ),
    ("e.jsonl", "", "auto", ": the trace is empty (no requests)"),
    ("e.jsonl", "\n  \n", "jsonl", ": the trace has no requests"),
    (
        "x.csv",
        "when,what\n1,2\n",
        "auto",
        ": cannot tell the trace format from its first line (give --trace-format)",
    ),
    ("x.jsonl", "{not json\n", "auto", ":1: not valid JSON (cannot tell the trace format)"),
]


@pytest.mark.parametrize(("name", "content", "fmt", "message"), CASES)
def test_bad_trace_is_one_error_naming_file_line_field(
    tmp_path: Path, name: str, content: str, fmt: str, message: str
) -> None:
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(TraceError) as e:
        load_trace(str(f), fmt)
    assert str(e.value).startswith(str(f) + message)
    assert "\n" not in str(e.value)
    assert isinstance(e.value, UsageError) and e.value.exit_code == 2


def test_the_bad_data_files() -> None:
    with pytest.raises(
        TraceError,
        match=re.escape("bad_field.jsonl:4: field 'input_length': expected a positive integer, got \"abc\""),
    ):
        load_trace(str(DATA / "bad_field.jsonl"))
    with pytest.raises(
        TraceError,
        match=re.escape("bad_row.csv:3: field 'GeneratedTokens': expected an integer >= 0, got \"-3\""),
    ):
        load_trace(str(DATA / "bad_row.csv"))


def test_missing_unreadable_and_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file or run directory"):
        load_trace(str(tmp_path / "nope.jsonl"))
    with pytest.raises(TraceError, match="a directory without records.parquet or records.jsonl"):
        detect_format(str(tmp_path))
    f = tmp_path / "bin.jsonl"
    f.write_bytes(b'{"timestamp": 0, "prompt": "\xff\xfe"}\n')
    with pytest.raises(TraceError, match="not a UTF-8 text file"):
        load_trace(str(f), "jsonl")


def test_empty_window() -> None:
    with pytest.raises(
        TraceError, match=r"no requests in the window from 100 s to 105 s \(the trace spans 7.277 s\)"
    ):
        load_trace(str(DATA / "mooncake.jsonl"), start_s=100, duration_s=5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fmt": "sharegpt"}, "unknown trace format 'sharegpt'"),
        ({"timestamp_unit": "h"}, "unknown timestamp unit 'h'"),
        ({"start_s": -1.0}, "the trace window needs a start >= 0 and a duration > 0"),
        ({"duration_s": 0.0}, "the trace window needs a start >= 0 and a duration > 0"),
        ({"limit": 0}, "the trace needs a limit >= 1"),
        ({"block_size": 0}, "a block size >= 1"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        load_trace(str(DATA / "generic.jsonl"), **kwargs)


def test_a_unit_only_where_the_format_has_numbers() -> None:
    with pytest.raises(UsageError, match="a azure trace's timestamps have a unit of their own"):
        load_trace(str(DATA / "azure_code.csv"), timestamp_unit="ms")


def test_cli_says_it_on_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["trace", "info", str(DATA / "bad_field.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vllm-locust trace: error: ")
    assert "bad_field.jsonl:4: field 'input_length'" in err


@pytest.mark.parametrize(
    ("endpoint", "line", "message"),
    [
        (
            "embeddings",
            '{"timestamp": 1, "input_len": 5, "images": 1}',
            ":2: field 'images': only a chat request carries images (this line goes to --endpoint embeddings)",
        ),
        (
            "completions",
            '{"timestamp": 1, "input_len": 5, "images": 3}',
            ":2: field 'images': only a chat request carries images (this line goes to --endpoint completions)",
        ),
        (
            "chat",
            '{"timestamp": 1, "input_len": 5, "session_id": "s", "endpoint": "rerank"}',
            ":2: field 'endpoint': a session's turns are chat, completions or responses requests, not rerank",
        ),
        (
            "embeddings",
            '{"timestamp": 1, "input_len": 5, "session_id": "s"}',
            ":2: field 'session_id': a session's turns are chat, completions or responses requests, not embeddings",
        ),
    ],
)
def test_a_line_s_images_and_endpoint_against_the_run_s_endpoint(
    tmp_path: Path, endpoint: str, line: str, message: str
) -> None:
    from vllm_users.workload.trace_schedule import check_trace

    f = tmp_path / "j.jsonl"
    f.write_text(J + line + "\n")
    with pytest.raises(TraceError) as e:
        check_trace(build(trace=str(f)).trace, endpoint, None)
    assert str(e.value) == str(f) + message
    ok = tmp_path / "ok.jsonl"  # the same lines are fine where they go to chat / carry no session
    ok.write_text(J + '{"timestamp": 1, "input_len": 5, "images": 1}\n')
    assert "2 requests" in check_trace(build(trace=str(ok)).trace, "chat", None)
