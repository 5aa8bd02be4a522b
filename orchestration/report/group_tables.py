"""The report's tables of a run's groups of requests beside its classes: per model (a model mix, or classes that
send to LoRA adapters), per endpoint (several --host URLs) and per replica (--replica-header), with how uneven the
fleet was; and where a TTFT went (the server's histograms against the client's). One definition for the HTML,
Markdown and PDF reports; a column no group has a figure for is left out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestration.report.summary_groups import imbalance_line
from vllm_users.measure import metric_keys as K
from vllm_users.measure.client_verdict import line, verdict_of
from vllm_users.measure.latency_breakdown import breakdown_lines

__all__ = [
    "GROUP_BLOCKS",
    "GroupTable",
    "breakdown_text",
    "client_health_line",
    "energy_text",
    "group_tables",
]

# result.json block -> (section title, first column's heading)
GROUP_BLOCKS: tuple[tuple[str, str, str], ...] = (
    ("per_model", "Per model", "Model"),
    ("per_endpoint", "Per endpoint", "Endpoint"),
    ("per_replica", "Per replica", "Replica"),
)

# heading, key in a group's figures, format ("%" for a share shown in per cent)
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("requests", "requests", "d"),
    ("share", "request_share", "%"),
    ("ok", K.COMPLETED, "d"),
    ("failed", K.FAILED, "d"),
    ("weight", "weight_share", "%"),
    ("tok/s", K.OUTPUT_THROUGHPUT, ".1f"),
    ("TTFT p50", K.TTFT.key("median"), ".1f"),
    ("TTFT p99", K.TTFT.p(99), ".1f"),
    ("TPOT p50", K.TPOT.key("median"), ".2f"),
    ("ITL p99", K.ITL.p(99), ".2f"),
    ("E2EL p99", K.E2EL.p(99), ".1f"),
    ("good", "good_fraction", "%"),
    ("goodput (req/s)", K.REQUEST_GOODPUT, ".3g"),
)


@dataclass(frozen=True)
class GroupTable:
    """One block's table: its title, the column headings, and one row of cell texts per group."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()  # a fleet's imbalance, and what it could not attribute


def _cell(v: Any, spec: str) -> str:
    if v is None:
        return "n/a"
    if spec == "%":
        return f"{100 * float(v):.1f} %"
    if spec == "d":
        return str(int(v))
    return format(float(v), spec)


def group_tables(result: Mapping[str, Any], run_name: str) -> list[GroupTable]:
    """Every grouping block of one run's result as a table (none for a block the result lacks)."""
    out = []
    for key, title, first in GROUP_BLOCKS:
        block = result.get(key)
        if not isinstance(block, Mapping) or not block:
            continue
        # a fleet's block holds its groups under "groups", beside its imbalance; a model's is the groups alone
        fleet = isinstance(block.get("groups"), Mapping)
        members = block["groups"] if fleet else block
        groups = [(str(name), g) for name, g in members.items() if isinstance(g, Mapping)]
        cols = [(h, k, f) for h, k, f in _COLUMNS if any(g.get(k) is not None for _, g in groups)]
        rows = tuple((name, *(_cell(g.get(k), f) for _, k, f in cols)) for name, g in groups)
        notes: list[str] = []
        if fleet:
            notes.append(imbalance_line(block.get("imbalance") or {}))
            if block.get("unnamed"):
                notes.append(f"requests whose answer named no replica: {block['unnamed']}")
        header = (first, *(h for h, _, _ in cols))
        out.append(GroupTable(f"{title}: {run_name}", header, rows, tuple(notes)))
    return out


def breakdown_text(result: Mapping[str, Any]) -> list[str]:
    """Where a TTFT went (result.json's `latency_breakdown`), in the console summary's lines; [] without one."""
    block = result.get("latency_breakdown")
    return breakdown_lines(block) if isinstance(block, Mapping) else []


def energy_text(result: Mapping[str, Any]) -> list[str]:
    """The GPUs over the measured window (result.json's `energy`), in the console summary's lines; [] without."""
    from vllm_users.measure.energy_lines import format_energy

    block = result.get("energy")
    return format_energy(block) if isinstance(block, Mapping) else []


def client_health_line(result: Mapping[str, Any]) -> str:
    """The client's health in words, as the console summary says it (its verdict and what to do)."""
    health = result.get("client_health")
    return line(verdict_of(health) if isinstance(health, Mapping) else None)
