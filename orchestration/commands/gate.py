"""`vllm-locust gate BASELINE CANDIDATE`: does the candidate regress against the baseline, beyond the noise?

Each side is a run directory, a `--repeats` directory or a baseline file (`vllm-locust gate --save-baseline FILE
RUN`). Every rule (`--max-regression p99_ttft_ms:10% ...`) gets a verdict from the per-request samples
(orchestration.gate). Exit 0 when no rule regressed, exit_codes.GATE_REGRESSED when one did, 2 on bad input
(runs whose settings differ included). Outputs: a console table, `--junit`, `--markdown` (also appended to
$GITHUB_STEP_SUMMARY when that is set) and `--json`. docs/ci.md puts it in a pipeline.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from orchestration.commands import reported
from orchestration.gate.output import console, junit, markdown, write_json, write_text
from orchestration.gate.rules import DEFAULT_RULES, parse_rules
from orchestration.gate.samples import SETTINGS, Side, load_side, mismatches, save_baseline
from orchestration.gate.verdict import CONFIDENCE, RESAMPLES, gate
from vllm_users import errors, exit_codes

__all__ = ["PROG", "main"]

PROG = "vllm-locust gate"
STEP_SUMMARY = "GITHUB_STEP_SUMMARY"  # GitHub Actions: Markdown appended here shows on the run's page


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} BASELINE CANDIDATE [options]\n       {PROG} --save-baseline FILE RUN",
        description="Fail CI on a regression that is not noise: each rule's verdict (regressed, improved, "
        "unchanged, inconclusive) comes from a confidence interval of the change, from the runs' per-request "
        "samples (or their repeats). BASELINE and CANDIDATE: run directories, --repeats directories or "
        "baseline files.",
    )
    p.add_argument(
        "sides", nargs="+", metavar="RUN", help="BASELINE CANDIDATE (with --save-baseline: one RUN)"
    )
    p.add_argument(
        "--max-regression",
        nargs="+",
        metavar="METRIC:LIMIT",
        default=None,
        help="Rules: METRIC:N%% (relative), METRIC:Npp (points of a rate), METRIC:N or :Nms "
        "(absolute); any metric of the result, plus error_rate. `defaults` inserts the default set: "
        + " ".join(DEFAULT_RULES).replace("%", "%%"),
    )  # argparse formats help with %
    p.add_argument(
        "--junit", metavar="FILE", help="Write JUnit XML: one test case per rule, a regression fails"
    )
    p.add_argument(
        "--markdown",
        metavar="FILE",
        help=f"Write the Markdown summary (also appended to ${STEP_SUMMARY} when it is set)",
    )
    p.add_argument("--json", metavar="FILE", help="Write every verdict, value and interval as JSON")
    p.add_argument(
        "--save-baseline",
        metavar="FILE",
        help="Save RUN (a run or --repeats directory) with its "
        "per-request samples as a baseline file, then exit",
    )
    p.add_argument(
        "--allow-mismatch",
        nargs="+",
        metavar="SETTING",
        default=[],
        help="Compare runs that differ in these settings (or `all`): " + ", ".join(SETTINGS),
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=CONFIDENCE,
        help=f"Family-wise confidence over all rules (default {CONFIDENCE})",
    )
    p.add_argument(
        "--resamples", type=int, default=RESAMPLES, help=f"Bootstrap resamples (default {RESAMPLES})"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="Bootstrap seed: the same runs and seed, the same verdicts"
    )
    p.add_argument("--quiet", action="store_true", help="Print only the last line")
    return p


def _check(a: argparse.Namespace) -> None:
    """UsageError for flags that cannot work together."""
    want = 1 if a.save_baseline else 2
    if len(a.sides) != want:
        raise errors.UsageError(
            "--save-baseline FILE takes one RUN"
            if a.save_baseline
            else f"expected BASELINE and CANDIDATE, got {len(a.sides)} path(s)"
        )
    if not 0.8 <= a.confidence < 1.0:
        raise errors.UsageError(f"--confidence {a.confidence}: expected a level in [0.8, 1), such as 0.95")
    if a.resamples < 200:
        raise errors.UsageError(f"--resamples {a.resamples}: at least 200 (the interval's tails need them)")
    unknown = sorted(set(a.allow_mismatch) - {*SETTINGS, "all"})
    if unknown:
        raise errors.UsageError(
            f"--allow-mismatch {' '.join(unknown)}: expected settings among {', '.join(SETTINGS)} or all"
        )


def _same_settings(base: Side, cand: Side, allowed: Sequence[str]) -> dict[str, list[object]]:
    """The differing settings that --allow-mismatch allows; UsageError naming those it does not."""
    diff = mismatches(base, cand)
    refused = {k: v for k, v in diff.items() if k not in allowed and "all" not in allowed}
    if refused:
        said = ", ".join(f"{k} ({a!r} vs {b!r})" for k, (a, b) in refused.items())
        raise errors.UsageError(
            f"baseline and candidate differ in {said}: they measure different things; "
            f"--allow-mismatch {' '.join(refused)} compares them anyway"
        )
    return {k: list(v) for k, v in diff.items()}


def _gate(a: argparse.Namespace) -> int:
    rules = parse_rules(a.max_regression)
    base, cand = load_side(a.sides[0]), load_side(a.sides[1])
    allowed = _same_settings(base, cand, a.allow_mismatch)
    report = gate(
        base, cand, rules, confidence=a.confidence, resamples=a.resamples, seed=a.seed, allowed=allowed
    )
    if a.quiet:
        print(f"{PROG}: {report.headline()}")
    else:
        print(console(report), flush=True)
    if a.junit:
        write_text(a.junit, junit(report))
    md = markdown(report)
    if a.markdown:
        write_text(a.markdown, md)
    if os.environ.get(STEP_SUMMARY):
        write_text(os.environ[STEP_SUMMARY], md + "\n", append=True)
    if a.json:
        write_json(a.json, report)
    return report.exit_code


@reported(PROG)
def main(argv: Sequence[str]) -> int:
    """Entry point of `vllm-locust gate`."""
    a = _parser().parse_args(list(argv))  # a bad flag: argparse's one line, exit 2 (through @reported)
    _check(a)
    if a.save_baseline:
        side = load_side(a.sides[0])
        save_baseline(a.save_baseline, side)
        if not a.quiet:
            print(f"{PROG}: wrote {a.save_baseline}: {side.describe()}")
        return exit_codes.OK
    return _gate(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
