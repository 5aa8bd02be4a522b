"""The trace formats: one `TraceFormat` record per format, each in a module of this package.

Every module of `vllm_users/workload/trace_formats/` whose name has no leading `_` defines `FORMAT`, the
record of one format named like the module (`azure_lmm.py`: `azure-lmm`): its reader, the unit of its
timestamps, how `auto` tells it from its first line, and its row of docs/traces.md's table. `formats()`
imports them once, in rank order; `--trace-format`'s choices, `load_trace`, `trace info` and the docs table
all read them, so a new format is one new module (CONTRIBUTING.md, "Add a trace format").
"""

from __future__ import annotations

import csv
import functools
import importlib
import io
import json
import os
import pkgutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from vllm_users import run_dir
from vllm_users.errors import TraceError
from vllm_users.workload.trace import TraceRequest

__all__ = ["Rows", "Sniff", "TraceFormat", "choices", "docs_table", "formats", "get", "own_unit_names"]

# the requests (absolute offsets in seconds, file order) and the rows skipped, by reason
Rows = tuple[list[TraceRequest], Counter[str]]


class Sniff:
    """What `auto` looks at: the path, and (read only when a format asks) the first non-blank line as JSON
    keys or as a CSV header. A line that cannot be read is no format's; its error is raised when none claims
    the file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.is_dir = os.path.isdir(path)
        self.error: TraceError | None = None

    @functools.cached_property
    def first_line(self) -> str:
        """The first non-blank line without its byte-order mark ("" for a directory or an unreadable file)."""
        if self.is_dir:
            return ""
        try:
            with open(self.path, encoding="utf-8-sig") as fh:
                for line in fh:
                    if line.strip():
                        return line.strip()
        except OSError as e:
            self.error = TraceError(f"{self.path}: cannot read the trace: {e.strerror or e}")
            return ""
        except UnicodeDecodeError:
            self.error = TraceError(f"{self.path}: not a UTF-8 text file")
            return ""
        self.error = TraceError(f"{self.path}: the trace is empty (no requests)")
        return ""

    @functools.cached_property
    def json_keys(self) -> frozenset[str] | None:
        """The keys of a first line that is a JSON object; None when it is not one."""
        first = self.first_line
        if not first.startswith("{"):
            return None
        try:
            return frozenset(json.loads(first).keys())
        except (ValueError, AttributeError):
            self.error = TraceError(f"{self.path}:1: not valid JSON (cannot tell the trace format)")
            return None

    @functools.cached_property
    def csv_header(self) -> frozenset[str] | None:
        """The cells of a first line that is not JSON, read as a CSV header; None for JSON or nothing."""
        first = self.first_line
        if not first or first.startswith("{"):
            return None
        return frozenset(h.strip() for h in next(csv.reader(io.StringIO(first)), []))

    def has_keys(self, *names: str) -> bool:
        """True when the first line is a JSON object with every key of `names`."""
        keys = self.json_keys
        return keys is not None and set(names) <= keys

    def has_columns(self, *names: str) -> bool:
        """True when the first line is a CSV header with every column of `names`."""
        header = self.csv_header
        return header is not None and set(names) <= header

    def is_run(self) -> bool:
        """True for a run directory (TraceError when it lacks its records) or a records file by its name."""
        if self.is_dir:
            if not run_dir.has_records(self.path):
                raise TraceError(
                    f"{self.path}: a directory without {run_dir.PARQUET} or {run_dir.RECORDS} (not a run directory)"
                )
            return True
        return os.path.basename(self.path) == run_dir.RECORDS


@dataclass(frozen=True)
class TraceFormat:
    """One trace format: its name, reader, timestamp unit, detection and docs row."""

    name: str  # --trace-format NAME; the module's name with `-` for `_`
    read: Callable[[str, float], Rows]  # (path, seconds per timestamp unit) -> the requests and skipped rows
    rank: int  # where it is listed (choices, docs) and tried by `auto`: lower first
    summary: str  # docs/traces.md's table: what it is and where such files come from
    timestamp: str  # docs: the unit of the file's timestamps
    detected_by: str  # docs: what `auto` looks for ("" when `auto` never picks it)
    # seconds per timestamp unit when --trace-timestamp-unit may change it; None: the timestamps are times of
    # day or epoch seconds, a unit of their own
    unit_s: float | None = None
    detect: Callable[[Sniff], bool] | None = None  # from the path and first line; None: never detected
    fallback: bool = False  # tried after every other format (our jsonl: any other JSON lines)


def _module_name(name: str) -> str:
    return name.replace("-", "_")


@functools.cache
def formats() -> tuple[TraceFormat, ...]:
    """Every format of the package, in rank order (imported once per process)."""
    found: list[TraceFormat] = []
    for info in pkgutil.iter_modules([os.path.dirname(__file__)]):
        if info.name.startswith("_") or info.name == "registry":
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        fmt = getattr(module, "FORMAT", None)
        if not isinstance(fmt, TraceFormat) or _module_name(fmt.name) != info.name:
            raise TypeError(f"{module.__name__} must define FORMAT, a TraceFormat named after the module")
        found.append(fmt)
    return tuple(sorted(found, key=lambda f: (f.rank, f.name)))


def get(name: str) -> TraceFormat:
    """The format called `name` (KeyError for none)."""
    for f in formats():
        if f.name == name:
            return f
    raise KeyError(name)


def choices() -> tuple[str, ...]:
    """--trace-format's values: `auto`, then every format in rank order."""
    return ("auto", *(f.name for f in formats()))


def own_unit_names() -> str:
    """The formats whose timestamps --trace-timestamp-unit may reinterpret, as `a/b/c` (for its help)."""
    return "/".join(f.name for f in formats() if f.unit_s is not None)


def detect(path: str) -> str:
    """The format of the trace at `path` from its path and first line: the first format (in rank order, the
    fallbacks last) whose detection claims it; a TraceError when none does."""
    sniff = Sniff(path)
    for f in sorted(formats(), key=lambda f: f.fallback):  # stable: rank order within each group
        if f.detect is not None and f.detect(sniff):
            return f.name
    if sniff.error is not None:
        raise sniff.error
    raise TraceError(f"{path}: cannot tell the trace format from its first line (give --trace-format)")


def _unit(f: TraceFormat) -> str:
    return f.timestamp if f.unit_s is None else f"{f.timestamp} (`--trace-timestamp-unit` changes it)"


def docs_table() -> str:
    """docs/traces.md's table of the formats, from their records (tests/unit check that the docs hold it)."""
    rows = ["| format | what it is | timestamps | `auto` picks it for |", "|---|---|---|---|"]
    rows += [f"| `{f.name}` | {f.summary} | {_unit(f)} | {f.detected_by or '-'} |" for f in formats()]
    return "\n".join(rows) + "\n"
