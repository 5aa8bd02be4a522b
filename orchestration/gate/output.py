"""The gate's outputs: the console table, JUnit XML (one test case per rule), Markdown (the step summary) and JSON.

All four are made from one `orchestration.gate.verdict.GateReport`, so they say the same thing.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from orchestration.gate.verdict import TOOL, GateReport, RuleResult
from vllm_users.atomic import atomic_json

__all__ = ["console", "junit", "markdown", "write_json", "write_text"]


def _num(v: float | None, r: RuleResult) -> str:
    return r.signed(v)


def _val(v: float | None, r: RuleResult) -> str:
    if v is None:
        return "-"
    return f"{v * 100:.2f}%" if r.unit == "pp" else f"{v:.4g}"


def _interval(r: RuleResult) -> str:
    return "-" if r.ci_low is None else f"[{_num(r.ci_low, r)}, {_num(r.ci_high, r)}]"


def _rows(report: GateReport) -> list[list[str]]:
    return [
        [
            r.rule,
            _val(r.baseline, r),
            _val(r.candidate, r),
            _num(r.change, r),
            _interval(r),
            r.verdict,
            r.method if not r.reason else f"{r.method}: {r.reason}",
        ]
        for r in report.results
    ]


def console(report: GateReport) -> str:
    """The table printed by `vllm-locust gate`."""
    head = ["rule", "baseline", "candidate", "change", f"{report.level:.1%} interval", "verdict", "method"]
    rows = _rows(report)
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head) - 1)]
    fmt = "  ".join(f"{{:{'<' if i in (0, 5) else '>'}{w}}}" for i, w in enumerate(widths))
    lines = [f"{TOOL}: baseline {report.baseline}", f"{' ' * len(TOOL)}  candidate {report.candidate}", ""]
    lines += [fmt.format(*head[:-1]) + "  " + head[-1]] + [fmt.format(*x[:-1]) + "  " + x[-1] for x in rows]
    for k, (a, b) in report.allowed_mismatches.items():
        lines.append(f"note: {k} differs (baseline {a}, candidate {b}), allowed by --allow-mismatch")
    lines += ["", report.method(), "", f"{TOOL}: {report.headline()} -> exit {report.exit_code}"]
    return "\n".join(lines)


def markdown(report: GateReport) -> str:
    """The step summary: a headline, the table, the method."""
    mark = "❌" if report.regressed else "✅"
    head = ["rule", "baseline", "candidate", "change", f"{report.level:.1%} interval", "verdict", "method"]
    rows = [
        [f"`{x[0]}`", *x[1:5], f"**{x[5]}**" if x[5] == "regressed" else x[5], x[6]] for x in _rows(report)
    ]
    lines = [
        f"### {mark} {TOOL}: {report.headline()}",
        "",
        f"Baseline: `{report.baseline}`  ",
        f"Candidate: `{report.candidate}`",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in x) + " |" for x in rows]
    for k, (a, b) in report.allowed_mismatches.items():
        lines.append(f"\n{k} differs (baseline `{a}`, candidate `{b}`), allowed by `--allow-mismatch`.")
    lines += ["", report.method(), ""]
    return "\n".join(lines)


def junit(report: GateReport) -> str:
    """JUnit XML: one test case per rule; a regression is a <failure>, an inconclusive rule <skipped>."""
    failures = len(report.regressed)
    skipped = sum(r.verdict == "inconclusive" for r in report.results)
    suites = ET.Element("testsuites", name=TOOL, tests=str(len(report.results)), failures=str(failures))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=TOOL,
        tests=str(len(report.results)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
    )
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname="vllm-locust.gate", name=r.rule)
        line = (
            f"{r.metric}: {_val(r.baseline, r)} -> {_val(r.candidate, r)}, change {_num(r.change, r)}, "
            f"{report.level:.1%} interval {_interval(r)}, limit {r.rule}: {r.verdict}"
        )
        detail = f"{line}\nmethod: {r.method}" + (f" ({r.reason})" if r.reason else "")
        if r.verdict == "regressed":
            ET.SubElement(case, "failure", message=line, type="regression").text = detail
        elif r.verdict == "inconclusive":
            ET.SubElement(case, "skipped", message=f"inconclusive: {r.reason or line}")
        ET.SubElement(case, "system-out").text = detail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def write_text(file: str, text: str, *, append: bool = False) -> None:
    """Write (or append) `text` to `file`, making its folder."""
    folder = os.path.dirname(os.path.abspath(file))
    os.makedirs(folder, exist_ok=True)
    with open(file, "a" if append else "w", encoding="utf-8") as fh:
        fh.write(text)


def write_json(file: str, report: GateReport) -> None:
    """The JSON document, written atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
    atomic_json(file, report.to_dict())
