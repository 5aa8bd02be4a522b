"""The trace-format registry ties together what a format is everywhere: each module of the package is one
record named after it, and --trace-format's choices (run and `trace info`), `auto`'s order, the timestamp-unit
help and docs/traces.md all come from the records."""

from __future__ import annotations

import dataclasses
import pkgutil
import re
from pathlib import Path

import pytest

from orchestration.commands import trace as trace_cmd
from vllm_users.errors import TraceError
from vllm_users.workload import trace_formats
from vllm_users.workload.trace_formats import TRACE_FORMATS, detect_format, load_trace, registry
from vllm_users.workload.trace_schedule import TraceOptions

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "traces"


def test_each_module_of_the_package_is_one_format_named_after_it() -> None:
    mods = sorted(
        m.name
        for m in pkgutil.iter_modules(trace_formats.__path__)
        if not m.name.startswith("_") and m.name != "registry"
    )
    assert sorted(f.name.replace("-", "_") for f in registry.formats()) == mods
    assert [f.rank for f in registry.formats()] == sorted(f.rank for f in registry.formats())
    assert len({f.rank for f in registry.formats()}) == len(mods)  # no tie: the order is the records'
    for f in registry.formats():
        assert registry.get(f.name) is f and f.summary and f.timestamp
        assert (f.detect is None) == (not f.detected_by)  # the docs say what auto looks for, if anything


def test_the_choices_everywhere_are_the_registry_s() -> None:
    names = tuple(f.name for f in registry.formats())
    assert TRACE_FORMATS == registry.choices() == ("auto", *names)
    field = {f.name: f for f in dataclasses.fields(TraceOptions)}["trace_format"]
    assert field.metadata["spec"].choices == TRACE_FORMATS
    info = trace_cmd._parser()._subparsers._group_actions[0].choices["info"]  # type: ignore[union-attr]
    action = next(a for a in info._actions if a.dest == "trace_format")
    assert tuple(action.choices) == TRACE_FORMATS
    own = registry.own_unit_names()
    assert own == "mooncake/burstgpt/jsonl"  # the formats whose timestamps are a number of a unit
    assert own in field.metadata["spec"].help or own in str(
        {f.name: f for f in dataclasses.fields(TraceOptions)}["trace_timestamp_unit"].metadata["spec"].help
    )


def test_docs_have_the_table_and_a_section_of_each_format() -> None:
    text = (ROOT / "docs" / "traces.md").read_text()
    assert registry.docs_table() in text
    sections = re.findall(r"^### `([\w-]+)`", text, re.M)
    assert sorted(n for n in sections if n in TRACE_FORMATS) == sorted(f.name for f in registry.formats())
    options = (ROOT / "docs" / "options.md").read_text()
    assert " \\| ".join(TRACE_FORMATS) in options  # the option table lists the choices


def test_auto_tries_the_formats_in_rank_order_and_the_fallback_last(tmp_path: Path) -> None:
    fallbacks = [f.name for f in registry.formats() if f.fallback]
    assert fallbacks == ["jsonl"]
    rec = tmp_path / "run.jsonl"  # a records line is JSON lines too: records (rank 50) claims it before jsonl
    rec.write_text('{"t_start": 1.0, "worker": "w", "endpoint": "chat", "scenario": "chat"}\n')
    assert detect_format(str(rec)) == "records"
    lmm = tmp_path / "lmm.csv"  # azure-lmm's header holds azure's columns: the lower rank wins
    lmm.write_text("TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n2024-10-15T12:00:00.269Z,1,10,5\n")
    assert detect_format(str(lmm)) == "azure-lmm"
    assert load_trace(str(lmm), "azure").requests[0].images is None  # named, azure reads it as before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the trace is empty"),
        ("{not json\n", "not valid JSON (cannot tell the trace format)"),
        ("a,b,c\n1,2,3\n", "cannot tell the trace format from its first line"),
    ],
)
def test_a_file_no_format_claims_says_why(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "t.txt"
    f.write_text(text)
    with pytest.raises(TraceError, match=re.escape(message)):
        detect_format(str(f))


def test_a_records_file_is_claimed_by_its_name_before_its_first_line_is_read(tmp_path: Path) -> None:
    f = tmp_path / "records.jsonl"
    f.write_text("")
    assert detect_format(str(f)) == "records"  # (an empty file of another name: "the trace is empty")
    assert detect_format(str(DATA / "generic.jsonl")) == "jsonl"
