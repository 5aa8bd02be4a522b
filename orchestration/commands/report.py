"""`vllm-locust report RUN_DIR [RUN_DIR ...] --output-dir D --format html,pdf,json,md`: the command line; the
report itself is orchestration.report.generate (a sweep's: orchestration.report.sweep_report).

Also run as `python -m orchestration.commands.report` (the web UI renders its report so far that way).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from orchestration.commands import reported
from orchestration.report.generate import FORMATS, generate
from orchestration.report.postprocess import expand_run_dirs
from orchestration.report.run_sets import is_sweep_dir
from vllm_users import errors, exit_codes
from vllm_users.measure.metrics import Slo
from vllm_users.run_dir import REPORT_DIR, stamp

__all__ = ["PROG", "main", "parse_formats"]

PROG = "vllm-locust report"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Reports, comparison and diagnosis of runs")
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="Run directories, or folders of them such as results/ (the first run is the baseline)",
    )
    p.add_argument(
        "--output-dir",
        "-o",
        default="",
        help="Where to write (default: RUN_DIR/report for one run, ./report-<time> for several)",
    )
    p.add_argument(
        "--format", default="html,json,md", help="Comma list of html,pdf,json,md (default html,json,md)"
    )
    p.add_argument(
        "--goodput", nargs="+", default=None, help="Recompute goodput with SLOs ttft:MS tpot:MS e2el:MS"
    )
    p.add_argument("--quiet", action="store_true", help="Print only errors")
    return p


def parse_formats(text: str) -> list[str]:
    """Split and check a --format list; UsageError naming an unknown format."""
    out = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in out if f not in FORMATS]
    if bad or not out:
        raise errors.UsageError(f"--format {text!r}: expected a comma list of {','.join(FORMATS)}")
    return out


def _slo(goodput: list[str] | None) -> Slo | None:
    """--goodput as an Slo, or None; UsageError with Slo's one-line reason."""
    if not goodput:
        return None
    try:
        return Slo.parse(goodput)
    except ValueError as e:
        raise errors.UsageError(str(e)) from e


def _report(a: argparse.Namespace) -> int:
    """Write the report the parsed arguments ask for; its exit code."""
    formats = parse_formats(a.format)
    slo = _slo(a.goodput)
    if len(a.runs) == 1 and is_sweep_dir(a.runs[0]):  # a sweep or an SLO search
        from orchestration.report.sweep_report import rewrite_report

        path = rewrite_report(a.runs[0], formats)
        if not a.quiet:
            print(f"vllm-locust report: wrote {path}")
        return exit_codes.OK
    runs = expand_run_dirs(a.runs)
    out = a.output_dir or (
        os.path.join(runs[0], REPORT_DIR)
        if len(runs) == 1 and os.path.isdir(runs[0])
        else f"report-{stamp()}"
    )
    return generate(runs, out, formats, slo=slo, quiet=a.quiet)


@reported(PROG)
def main(argv: Sequence[str]) -> int:
    """Entry point of `vllm-locust report`."""
    a = _parser().parse_args(list(argv))  # a bad flag: argparse's one line, exit 2 (through @reported)
    return _report(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
