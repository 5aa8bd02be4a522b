"""A report of run directories: load, analyse, render HTML/PDF/JSON/Markdown (`vllm-locust report`, whose command
line is orchestration.commands.report), and the report `vllm-locust run` writes after a run."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from orchestration.report.postprocess import ReportError, RunData, load_run, write_json_atomic
from orchestration.report.run_sets import is_repeats_dir, load_repeats
from vllm_users import exit_codes
from vllm_users.atomic import write_atomic
from vllm_users.measure.metrics import Slo
from vllm_users.run_dir import REPORT_DIR, REPORT_HTML, REPORT_JSON, REPORT_MD, REPORT_PDF

__all__ = ["AFTER_RUN_FORMATS", "FORMATS", "format_significance", "generate", "report_after_run"]

FORMATS = ("html", "pdf", "json", "md")
AFTER_RUN_FORMATS = ("html", "json", "md")  # the PDF repeats the HTML; on demand only


def generate(
    run_dirs: Sequence[str],
    output_dir: str,
    formats: Sequence[str],
    *,
    slo: Slo | None = None,
    quiet: bool = False,
) -> int:
    """Load, analyse and render; returns an exit code (USAGE when no run could be read)."""
    runs: list[RunData] = []
    failed: list[str] = []
    for d in run_dirs:
        try:
            runs.append(load_repeats(d) if is_repeats_dir(d) else load_run(d, slo=slo))
        except ReportError as e:
            failed.append(str(e))
            print(f"vllm-locust report: error: {e}", file=sys.stderr)
        except (OSError, ValueError, KeyError, TypeError) as e:  # a run dir we do not understand: skip it
            failed.append(f"{d}: {type(e).__name__}: {e}")
            print(f"vllm-locust report: error: {d}: cannot read ({type(e).__name__}: {e})", file=sys.stderr)
    if not runs:
        print("vllm-locust report: error: nothing to report", file=sys.stderr)
        return exit_codes.USAGE
    for r in runs:
        for w in r.warnings:
            print(f"vllm-locust report: warning: {r.name}: {w}", file=sys.stderr)
    names = [r.name for r in runs]
    for i, r in enumerate(runs):  # duplicate basenames (a/run, b/run) would make the tables ambiguous
        if names.count(r.name) > 1:
            r.name = f"{r.name}#{i + 1}"
    from orchestration.report.model import build_report
    from orchestration.report.plots import all_plots
    from orchestration.report.render import render_html, render_markdown, render_pdf

    report = build_report(runs, failed)
    os.makedirs(output_dir, exist_ok=True)
    written = []
    if "json" in formats:
        path = os.path.join(output_dir, REPORT_JSON)
        write_json_atomic(path, report.to_json())
        written.append(path)
    if "md" in formats:
        path = os.path.join(output_dir, REPORT_MD)
        write_atomic(path, render_markdown(report))
        written.append(path)
    if "html" in formats or "pdf" in formats:
        plots = all_plots(runs)
        if "html" in formats:
            path = os.path.join(output_dir, REPORT_HTML)
            write_atomic(path, render_html(report, plots))
            written.append(path)
        if "pdf" in formats:
            path = os.path.join(output_dir, REPORT_PDF)
            render_pdf(report, plots, path)
            written.append(path)
    if not quiet:
        if report.comparison:  # the lead: which run is worse, and by how much, before anything else
            from orchestration.report.compare import lead

            for line in lead(report.comparison):
                print(f"vllm-locust report: {line}")
        for g in report.finding_groups():
            evidence = "; ".join(g.evidence_lines())
            print(f"vllm-locust report: [{g.severity}] {g.title} ({', '.join(g.runs)}): {evidence}")
        if report.comparison:
            from orchestration.report.compare import describe_setup_differences

            for line in describe_setup_differences(report.comparison):
                print(f"vllm-locust report: setups differ: {line}")
            print(format_significance(report.comparison))
        print("vllm-locust report: wrote " + ", ".join(written))
    return exit_codes.OK


def format_significance(comparison: dict[str, Any]) -> str:
    """One line per compared metric and run: the change and whether it is significant, with the test named."""
    from orchestration.report.significance import describe

    lines = []
    base = comparison["baseline"]
    for i, name in enumerate(comparison["runs"][1:]):
        tested = [
            row for row in comparison["rows"] if (row["changes"][i].get("significance") or {}).get("test")
        ]
        sig = [row for row in tested if row["changes"][i]["significance"]["significant"]]
        lines.append(
            f"vllm-locust report: {name} vs {base}: {len(sig)} of {len(tested)} tested metrics differ significantly"
        )
        for row in tested:
            c = row["changes"][i]
            pct = f"{c['pct']:+.1f} %" if c.get("pct") is not None else "n/a"
            word = f"{c['verdict']}: " if c["verdict"] in ("better", "worse") else ""
            lines.append(f"  {row['metric']:<26} {pct:>9}  {word}{describe(c['significance'])}")
    return "\n".join(lines)


def report_after_run(run_dir: str) -> None:
    """Called by `vllm-locust run` at the end: writes RUN_DIR/report/; warns, never raises."""
    try:
        t = time.perf_counter()
        generate([run_dir], os.path.join(run_dir, REPORT_DIR), AFTER_RUN_FORMATS, quiet=True)
        path = os.path.join(run_dir, REPORT_DIR, REPORT_HTML)
        if os.path.exists(path):
            print(f"vllm-locust: report {path} ({time.perf_counter() - t:.1f} s)", flush=True)
    except Exception as e:  # noqa: BLE001 - the run's results are already written; a report bug must not fail it
        print(f"vllm-locust: warning: report not written ({type(e).__name__}: {e})", file=sys.stderr)
