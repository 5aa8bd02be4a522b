"""`--find-max-rate`'s console answer: the maximum first (orchestration.report.run_sets.search_headline), then
every step in one table: its rate, how many requests completed of those it sent, how many of its arrivals went
out on schedule, the SLO percentile of TTFT and TPOT, and its verdict with every reason it failed. A column that
no step has a number for is left out (a number that does not apply is absent, never 0)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from orchestration.report.run_sets import search_headline
from vllm_users.measure import metric_keys as K
from vllm_users.measure.metric_keys import percentile_name
from vllm_users.run_dir import SWEEP

__all__ = ["Cell", "aligned", "filled", "format_search", "step_cells", "verdict_cell"]

Cell = Callable[[dict[str, Any], str], str | None]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _rate(s: dict[str, Any], _p: str) -> str | None:
    t = _num(s.get("target"))
    return "probe" if s.get("verdict") == "probe" else (f"{t:g}" if t is not None else None)


def _completed(s: dict[str, Any], _p: str) -> str | None:
    done, sent = _num(s.get(K.COMPLETED)), _num(s.get("requests"))
    if done is None:
        return None
    return f"{done:.0f}/{sent:.0f}" if sent is not None else f"{done:.0f}"


def _on_schedule(s: dict[str, Any], _p: str) -> str | None:
    v = _num((s.get("judgement") or {}).get("on_schedule"))
    return f"{v:.0%}" if v is not None else None


def _at(metric: str) -> Cell:
    def cell(s: dict[str, Any], pname: str) -> str | None:
        # a step's SLO metrics at the SLO percentile (its judgement); the probe's and the others' from its row,
        # which holds p50 and p99 only
        v = _num(((s.get("judgement") or {}).get("slo_values_ms") or {}).get(metric))
        if v is None:
            v = _num(s.get(f"{metric}_{pname}_ms"))
        return f"{v:.1f}" if v is not None else None

    return cell


def verdict_cell(s: dict[str, Any], _p: str) -> str | None:
    """A step's verdict with every reason it failed."""
    v = s.get("verdict")
    reasons = (s.get("judgement") or {}).get("reasons") or []
    noisy = any(
        c.get("side") == "straddles" for c in ((s.get("judgement") or {}).get("slo_ci_ms") or {}).values()
    )
    said = " (within the SLO percentile's noise)" if noisy and v in ("holds", "fails") else ""
    if v in ("fails", "invalid") and reasons:
        return f"{v}{said}: " + "; ".join(reasons)
    return f"{v}{said}" if v else None


def _columns(pname: str) -> list[tuple[str, Cell]]:
    return [
        ("rate req/s", _rate),
        ("completed", _completed),
        ("on schedule", _on_schedule),
        (f"{K.TTFT.label} {pname} ms", _at(K.TTFT.name)),
        (f"{K.TPOT.label} {pname} ms", _at(K.TPOT.name)),
        ("verdict", verdict_cell),
    ]


def filled(
    columns: Sequence[tuple[str, Cell]], steps: Sequence[dict[str, Any]], pname: str
) -> tuple[list[str], list[list[str]]]:
    """The table of `columns` over `steps`: its header and rows, without the columns that no step has a value for
    ("-" where one step lacks it). Sweeps' console tables use it too (capacity/sweep.py)."""
    table = [[cell(s, pname) for _, cell in columns] for s in steps]
    keep = [i for i in range(len(columns)) if any(row[i] is not None for row in table)]
    return [columns[i][0] for i in keep], [[row[i] or "-" for i in keep] for row in table]


def aligned(header: list[str], rows: list[list[str]]) -> list[str]:
    """The table's lines: columns right-aligned to their widest cell, the last (a verdict and its reasons) left
    to run on, unpadded."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    last = len(header) - 1

    def line(r: list[str]) -> str:
        return "  ".join(c if i == last else c.rjust(widths[i]) for i, c in enumerate(r)).rstrip()

    return [line(header), *(line(r) for r in rows)]


def step_cells(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The steps table of a search document (sweep.json of kind max_rate_search): its header and rows, without
    the columns that no step has a value for ("-" where one step lacks it)."""
    pname = percentile_name(float(doc.get("slo_percentile") or 99.0))
    return filled(_columns(pname), doc.get("steps") or [], pname)


def format_search(doc: dict[str, Any], path: str) -> str:
    """The search's console answer: the maximum, then the steps in one table, then where sweep.json is."""
    header, rows = step_cells(doc)
    return "\n".join(
        [
            *(f"vllm-locust: {x}" for x in search_headline(doc)),
            "=== find-max-rate steps ===",
            *aligned(header, rows),
            f"Steps: {os.path.join(path, SWEEP)} (each step's own summary: its directory's console.txt)",
        ]
    )
