"""`vllm-locust report RUN_DIR [RUN_DIR ...] --output-dir D --format html,pdf,json,md`."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from orchestration.report.postprocess import (
    ReportError,
    RunData,
    expand_run_dirs,
    load_run,
    write_json_atomic,
)
from vllm_users import exit_codes
from vllm_users.atomic import write_atomic
from vllm_users.measure.metrics import Slo

FORMATS = ("html", "pdf", "json", "md")
AFTER_RUN_FORMATS = ("html", "json", "md")  # the PDF repeats the HTML; on demand only
REPORT_DIR = "report"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vllm-locust report", description="Reports, comparison and diagnosis of runs"
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="Run directories, or folders of them such as results/ (the first run is the baseline)")
    p.add_argument("--output-dir", "-o", default="", help="Where to write (default: RUN_DIR/report for one run, "
                   "./report-<time> for several)")  # fmt: skip
    p.add_argument(
        "--format", default="html,json,md", help="Comma list of html,pdf,json,md (default html,json,md)"
    )
    p.add_argument(
        "--goodput", nargs="+", default=None, help="Recompute goodput with SLOs ttft:MS tpot:MS e2el:MS"
    )
    p.add_argument("--quiet", action="store_true", help="Print only errors")
    return p


def generate(run_dirs: Sequence[str], output_dir: str, formats: Sequence[str], *, slo: Slo | None = None,
             quiet: bool = False) -> int:  # fmt: skip
    """Load, analyse and render; returns an exit code (USAGE when no run could be read)."""
    runs: list[RunData] = []
    failed: list[str] = []
    from orchestration.capacity.repeats import is_repeats_dir, load_repeats

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
        path = os.path.join(output_dir, "report.json")
        write_json_atomic(path, report.to_json())
        written.append(path)
    if "md" in formats:
        path = os.path.join(output_dir, "report.md")
        write_atomic(path, render_markdown(report))
        written.append(path)
    if "html" in formats or "pdf" in formats:
        plots = all_plots(runs)
        if "html" in formats:
            path = os.path.join(output_dir, "report.html")
            write_atomic(path, render_html(report, plots))
            written.append(path)
        if "pdf" in formats:
            path = os.path.join(output_dir, "report.pdf")
            render_pdf(report, plots, path)
            written.append(path)
    if not quiet:
        for f in report.findings:
            print(f"vllm-locust report: [{f.severity}] {f.title} ({f.run}): {f.evidence}")
        if report.comparison:
            print(format_significance(report.comparison))
        print("vllm-locust report: wrote " + ", ".join(written))
    return exit_codes.OK



def format_significance(comparison: dict[str, Any]) -> str:
    """One line per compared metric and run: the change and whether it is significant, with the test named."""
    from orchestration.capacity.significance import describe

    lines = []
    base = comparison["baseline"]
    for i, name in enumerate(comparison["runs"][1:]):
        tested = [row for row in comparison["rows"] if (row["changes"][i].get("significance") or {}).get("test")]
        sig = [row for row in tested if row["changes"][i]["significance"]["significant"]]
        lines.append(f"vllm-locust report: {name} vs {base}: {len(sig)} of {len(tested)} tested metrics differ significantly")
        for row in tested:
            c = row["changes"][i]
            pct = f"{c['pct']:+.1f} %" if c.get("pct") is not None else "n/a"
            lines.append(f"  {row['metric']:<26} {pct:>9}  {describe(c['significance'])}")
    return "\n".join(lines)


def parse_formats(text: str) -> list[str]:
    """Split and check a --format list; raises ValueError naming an unknown format."""
    out = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in out if f not in FORMATS]
    if bad or not out:
        raise ValueError(f"--format {text!r}: expected a comma list of {','.join(FORMATS)}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `vllm-locust report`."""
    p = _parser()
    try:
        a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # argparse exits 2 on bad flags and 0 on --help
        return int(e.code or 0)
    try:
        formats = parse_formats(a.format)
        slo = Slo.parse(a.goodput) if a.goodput else None
    except ValueError as e:
        print(f"vllm-locust report: error: {e}", file=sys.stderr)
        return exit_codes.USAGE
    if len(a.runs) == 1 and os.path.exists(os.path.join(a.runs[0], "sweep.json")):  # a sweep or an SLO search
        from orchestration.report.sweep_report import rewrite_report

        path = rewrite_report(a.runs[0])
        if not a.quiet:
            print(f"vllm-locust report: wrote {path}")
        return exit_codes.OK
    runs = expand_run_dirs(a.runs)
    out = a.output_dir or (
        os.path.join(runs[0], REPORT_DIR) if len(runs) == 1 and os.path.isdir(runs[0])
        else f"report-{time.strftime('%Y%m%d-%H%M%S')}"
    )  # fmt: skip
    return generate(runs, out, formats, slo=slo, quiet=a.quiet)


def report_after_run(run_dir: str) -> None:
    """Called by `vllm-locust run` at the end: writes RUN_DIR/report/; warns, never raises."""
    try:
        t = time.perf_counter()
        generate([run_dir], os.path.join(run_dir, REPORT_DIR), AFTER_RUN_FORMATS, quiet=True)
        path = os.path.join(run_dir, REPORT_DIR, "report.html")
        if os.path.exists(path):
            print(f"vllm-locust: report {path} ({time.perf_counter() - t:.1f} s)", flush=True)
    except Exception as e:  # noqa: BLE001 - the run's results are already written; a report bug must not fail it
        print(f"vllm-locust: warning: report not written ({type(e).__name__}: {e})", file=sys.stderr)
