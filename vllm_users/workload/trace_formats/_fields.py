"""The field checks every trace reader shares: one `TraceError` naming the file, the line (a CSV's line number,
header = 1) and the field of the first bad row, and the two ways rows are read (JSON lines, CSV columns).
Per row only the json/csv decode and a few type checks run: a 1M-line trace reads in seconds.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

from vllm_users.errors import TraceError

__all__ = [
    "bad",
    "csv_int",
    "csv_rows",
    "int_field",
    "json_lines",
    "lengths_or_skip",
    "missing",
    "number_field",
    "text_field",
]

_decode = json.JSONDecoder().decode
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # the C scanner without decode()'s two regex passes: ~2x on short lines


# ------------------------------------------------------------------------------------------ field checks
def _shown(value: Any) -> str:
    """A value as the error message shows it: JSON, cut short."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def bad(path: str, line: int, name: str, expected: str, value: Any) -> TraceError:
    """The one-line error of a bad field: `FILE:LINE: field 'NAME': expected ..., got VALUE`."""
    return TraceError(f"{path}:{line}: field '{name}': expected {expected}, got {_shown(value)}")


def missing(path: str, line: int, name: str) -> TraceError:
    """The one-line error of a required field that is absent."""
    return TraceError(f"{path}:{line}: field '{name}': missing")


def int_field(
    d: dict[str, Any], name: str, path: str, line: int, *, least: int, required: bool = True
) -> int | None:
    """d[name] as an int >= least (a JSON integer, not a bool or float); None when absent and not required."""
    v = d.get(name)
    if type(v) is int and v >= least:
        return v
    if v is None and name not in d and not required:
        return None
    if v is None and name not in d:
        raise missing(path, line, name)
    raise bad(path, line, name, "a positive integer" if least == 1 else f"an integer >= {least}", v)


def number_field(d: dict[str, Any], name: str, path: str, line: int) -> float:
    """d[name] as a finite number >= 0."""
    v = d[name]
    if type(v) in (int, float) and v >= 0 and math.isfinite(v):
        return float(v)
    raise bad(path, line, name, "a number >= 0", v)


def text_field(d: dict[str, Any], name: str, path: str, line: int) -> str | None:
    """d[name] as a non-empty string; None when absent (or null)."""
    v = d.get(name)
    if v is None or (type(v) is str and v):
        return v
    raise bad(path, line, name, "a non-empty string", v)


def csv_int(text: str, name: str, path: str, line: int) -> int:
    """A CSV cell as an int >= 0."""
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise bad(path, line, name, "an integer >= 0", text)
    return v


# ------------------------------------------------------------------------------------------ JSON lines
def json_lines(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for each non-blank line; a line that is not a JSON object is an error."""
    with open(path, encoding="utf-8-sig") as fh:  # -sig: a byte-order mark (Windows editors) is not data
        for n, line in enumerate(fh, 1):
            if not line or line.isspace():
                continue
            try:
                d, end = _scan(line, 0)
                if end != len(line) and not line[end:].isspace():
                    d = _decode(line)  # raises "Extra data" with its column
            except StopIteration:  # nothing JSON at column 1 (a space, a bare word): decode() says what
                try:
                    d = _decode(line)
                except ValueError as e:
                    raise TraceError(f"{path}:{n}: not valid JSON: {getattr(e, 'msg', e)}") from None
            except ValueError as e:
                raise TraceError(f"{path}:{n}: not valid JSON: {getattr(e, 'msg', e)}") from None
            if type(d) is not dict:
                raise TraceError(f"{path}:{n}: expected a JSON object, got {_shown(d)}")
            yield n, d


# ------------------------------------------------------------------------------------------ CSV
def csv_rows(path: str, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """(line number, the cells of `columns` in that order) for each non-empty row after the header."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        for c in columns:
            if c not in header:
                raise TraceError(
                    f"{path}:1: missing column '{c}' (the header has {', '.join(header) or 'nothing'})"
                )
        idx = [header.index(c) for c in columns]
        width = max(idx) + 1
        for row in reader:
            if not row:
                continue
            if len(row) < width:
                raise TraceError(f"{path}:{reader.line_num}: expected {len(header)} columns, got {len(row)}")
            yield reader.line_num, [row[i] for i in idx]


def lengths_or_skip(inp: int, outl: int, skipped: Counter[str]) -> bool:
    """True for a row with prompt and answer tokens; else False, the row counted as `zero_input`/`zero_output`."""
    if inp and outl:
        return True
    skipped["zero_input" if not inp else "zero_output"] += 1
    return False
