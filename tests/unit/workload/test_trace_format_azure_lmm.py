"""The `azure-lmm` format (Azure's multimodal inference trace of 2025): each row's lengths and exact image count,
its times of day as `azure` reads them, `auto` picking it from its header, and its bad cells named by line."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from orchestration.commands import trace as trace_cmd
from vllm_users.errors import TraceError, UsageError
from vllm_users.options import build
from vllm_users.workload.trace_formats import detect_format, load_trace
from vllm_users.workload.trace_schedule import check_trace

HEADER = "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n"
# the first rows of the published file (AzureLMMInferenceTrace_multimodal.csv), and a row of 0 generated tokens
ROWS = [
    ("2024-10-15T12:00:00.269Z", 0, 770, 491),
    ("2024-10-15T12:00:05.819Z", 1, 949, 126),
    ("2024-10-15T12:00:06.513Z", 1, 964, 79),
    ("2024-10-15T12:00:07.332Z", 0, 78, 0),
    ("2024-10-15T12:00:07.566Z", 16, 1724, 28),
]


def _write(tmp_path: Path, rows: list[tuple[str, int, int, int]] = ROWS, name: str = "lmm.csv") -> Path:
    f = tmp_path / name
    f.write_text(HEADER + "".join(f"{t},{k},{c},{g}\n" for t, k, c, g in rows))
    return f


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_rows_become_requests_with_their_images(tmp_path: Path) -> None:
    f = _write(tmp_path)
    assert detect_format(str(f)) == "azure-lmm"
    t = load_trace(str(f))
    assert t.format == "azure-lmm" and t.skipped == {"zero_output": 1}
    kept = [r for r in ROWS if r[3]]
    assert [(r.input_len, r.output_len, r.images) for r in t.requests] == [(c, g, k) for _, k, c, g in kept]
    t0 = _epoch(kept[0][0])
    assert [r.offset_s for r in t.requests] == pytest.approx([_epoch(x[0]) - t0 for x in kept], abs=1e-6)
    assert [r.line for r in t.requests] == [2, 3, 4, 6]  # the CSV's lines (header = 1); line 5 was skipped


def test_its_timestamps_are_times_of_day(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="have a unit of their own"):
        load_trace(str(_write(tmp_path)), timestamp_unit="ms")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (("2024-10-15T12:00:08Z", -1, 10, 5), "field 'NumImages': expected an integer >= 0, got \"-1\""),
        (("2024-10-15T12:00:08Z", 1, "x", 5), "field 'ContextTokens': expected an integer >= 0, got \"x\""),
        (("yesterday", 1, 10, 5), "field 'TIMESTAMP': expected a time like 2023-11-16 18:15:46.6805900"),
    ],
)
def test_a_bad_cell_is_named_by_its_line(tmp_path: Path, row: tuple, message: str) -> None:
    f = _write(tmp_path, [ROWS[0], row])  # type: ignore[list-item]
    with pytest.raises(TraceError) as e:
        load_trace(str(f))
    assert str(e.value).startswith(f"{f}:3: {message}")


def test_a_missing_images_column_is_no_azure_lmm_file(tmp_path: Path) -> None:
    f = tmp_path / "az.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-10-15T12:00:00.269Z,10,5\n")
    assert detect_format(str(f)) == "azure"  # the 2023/2024 traces read as before
    with pytest.raises(TraceError, match=r":1: missing column 'NumImages'"):
        load_trace(str(f), "azure-lmm")


def test_images_go_only_to_chat(tmp_path: Path) -> None:
    f = _write(tmp_path)
    o = build(trace=str(f)).trace
    assert "4 requests" in check_trace(o, "chat", None)
    with pytest.raises(TraceError, match=r":3: field 'images': only a chat request carries images"):
        check_trace(o, "completions", None)


def test_trace_info_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _write(tmp_path)
    assert trace_cmd.main(["info", str(f), "--trace-format", "azure-lmm", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["format"], info["requests"], info["skipped"]) == ("azure-lmm", 4, {"zero_output": 1})
    assert info["input_len"]["max"] == 1724
