"""A diagnosis finding (one rule fired on one run), findings grouped over runs, and which of them are problems."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["SEVERITY_ORDER", "Finding", "FindingGroup", "group_findings", "problems"]

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass
class Finding:
    """One fired rule."""

    rule: str
    run: str
    severity: str  # "critical" | "warning" | "info" (info: context, not a problem)
    title: str
    threshold: str
    evidence: str
    action: str

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)


def problems(findings: Sequence[Finding]) -> list[Finding]:
    """Findings that are problems (critical or warning), without the informational ones."""
    return [f for f in findings if f.severity != "info"]


@dataclass
class FindingGroup:
    """One finding as it fired on one or more runs: the same rule, title, threshold and advice."""

    rule: str
    severity: str
    title: str
    threshold: str
    action: str
    runs: list[str]
    evidence: list[tuple[str, str]]  # (run, its evidence), in the order of `runs`

    def evidence_lines(self) -> list[str]:
        """The evidence, once when every run's is the same, else each run's after its name."""
        if len({ev for _run, ev in self.evidence}) == 1:
            return [self.evidence[0][1]]
        return [f"{run}: {ev}" for run, ev in self.evidence]


def group_findings(findings: Sequence[Finding]) -> list[FindingGroup]:
    """Findings that say the same thing of several runs, once, with the runs they apply to (order kept)."""
    groups: dict[tuple[str, ...], FindingGroup] = {}
    for f in findings:
        key = (f.rule, f.severity, f.title, f.threshold, f.action)
        g = groups.setdefault(key, FindingGroup(f.rule, f.severity, f.title, f.threshold, f.action, [], []))
        g.runs.append(f.run)
        g.evidence.append((f.run, f.evidence))
    return list(groups.values())
