"""The figures of sweeps and SLO searches: axes that keep a small spread small, the SLO line drawn and the answer
marked (read off the matplotlib Figure's artists), and report tables without a column that no step has."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from orchestration.report.sweep_report import curves_figure, pareto_figure, write_sweep_report


def _visible_share(ax: Any, values: list[float]) -> float:
    """The share of the y axis that `values`' spread covers."""
    lo, hi = ax.get_ylim()
    return float((max(values) - min(values)) / (hi - lo))


def _steps(ttft: list[float], rates: list[float] | None = None) -> list[dict[str, Any]]:
    rates = rates or [1.0 + i for i in range(len(ttft))]
    return [
        {
            "name": f"step-0{i + 1}",
            "label": f"rate {r:g}",
            "kind": "rate",
            "target": r,
            "achieved_rate": r,
            "output_throughput": 100.0 * (1.0 + 0.01 * i),
            "output_tok_per_s_per_user": 50.0 * (1.0 - 0.01 * i),
            "ttft_p50_ms": t,
            "ttft_p99_ms": t + 1.0,
            "tpot_p50_ms": 10.0 + 0.1 * i,
            "tpot_p99_ms": 12.0 + 0.1 * i,
            "e2el_p50_ms": 500.0 + i,
            "failed": 0,
        }
        for i, (r, t) in enumerate(zip(rates, ttft, strict=True))
    ]


def test_a_two_percent_spread_keeps_its_proportion() -> None:
    # the sweep's curves and Pareto view: three steps within 2 % of each other look it
    plot = curves_figure(_steps([100.0, 101.0, 102.0]))
    assert plot is not None
    ttft = plot.figure.axes[0]
    assert _visible_share(ttft, [100.0, 101.0, 102.0]) < 0.05
    assert ttft.get_ylim()[0] == 0.0 and ttft.get_ylim()[1] >= 103.0  # the p99s stay in view
    pareto = pareto_figure(_steps([100.0, 101.0, 102.0]))
    assert pareto is not None
    assert _visible_share(pareto.figure.axes[0], [50.0, 49.0]) < 0.05


def test_limits_of_data_below_zero_and_without_data() -> None:
    from orchestration.report.plots import honest_limits

    lo, hi = honest_limits([100.0, 101.0, 102.0]) or (0.0, 0.0)
    assert lo == 0.0 and 2.0 / (hi - lo) < 0.05  # about 2 % of the axis, not all of it
    assert honest_limits([]) is None and honest_limits([float("nan")]) is None
    lo, hi = honest_limits([-1.0, 1.0]) or (0.0, 0.0)
    assert lo < -1.0 and hi > 1.0 and 2.0 / (hi - lo) > 0.8  # a difference around zero keeps its range
    lo, hi = honest_limits([-100.0, -99.0]) or (0.0, 0.0)
    assert (hi - lo) >= 0.1 * 100.0  # a 1 % spread far from zero is padded to a tenth of its magnitude
    assert honest_limits([0.0, 0.0]) == (0.0, 1.0)


def _hlines(ax: Any) -> list[float]:
    """The y of every line across the axes (axhline)."""
    return [
        float(ln.get_ydata()[0]) for ln in ax.get_lines() if ln.get_transform() is ax.get_yaxis_transform()
    ]


def _vlines(ax: Any) -> dict[float, str]:
    """The x of every line up the axes (axvline), with its legend label."""
    return {
        float(ln.get_xdata()[0]): str(ln.get_label())
        for ln in ax.get_lines()
        if ln.get_transform() is ax.get_xaxis_transform()
    }


def _search_doc() -> dict[str, Any]:
    def step(target: float | None, verdict: str, ttft: float | None, achieved: float) -> dict[str, Any]:
        row = _steps([20.0], [achieved])[0]
        row.update(target=target, verdict=verdict, label=f"rate {target}" if target else "throughput")
        if ttft is not None:
            row["judgement"] = {
                "slo_values_ms": {"ttft": ttft},
                "reasons": [] if verdict == "holds" else ["x"],
            }
        return row

    return {
        "kind": "max_rate_search",
        "sweep": "find-max-rate",
        "host": "embedded simulator",
        "slo_ms": {"ttft": 60.0},
        "slo_percentile": 99.0,
        "max_error_rate": 0.01,
        "probe_capacity_rps": 74.8,
        "max_rate": 50.459,
        "lowest_failing_rate": 67.279,
        "steps": [
            step(None, "probe", None, 74.8),
            step(74.755, "fails", 61.8, 56.4),
            step(67.279, "fails", 57.4, 41.4),
            step(33.639, "holds", 48.3, 39.9),
            step(50.459, "holds", 55.4, 47.7),
        ],
    }


def test_the_search_figure_draws_the_slo_line_and_marks_the_max_rate(tmp_path: Any) -> None:
    from orchestration.report.sweep_report import figures

    lead, rest = figures(_search_doc())
    assert [p.key for p in lead] == ["max-rate"]  # one figure for the answer, not one per step
    ax = lead[0].figure.axes[0]
    assert _hlines(ax) == [60.0]  # the SLO
    v = _vlines(ax)
    assert "max rate within the SLO: 50.459 req/s" in v[50.459] and "probe" in v[74.8]
    spans = [p for p in ax.patches if "search resolution [50.459, 67.279)" in str(p.get_label())]
    assert len(spans) == 1

    # every tried rate drawn at its SLO value, by verdict: 2 held, 2 failed (the probe is the dotted line)
    def drawn(verdict: str) -> set[tuple[float, float]]:
        return {
            (float(o[0]), float(o[1]))
            for c in ax.collections
            if verdict in str(c.get_label())
            for o in np.asarray(c.get_offsets())
        }

    held, failed = drawn("holds"), drawn("fails")
    assert held == {(33.639, 48.3), (50.459, 55.4)} and failed == {(74.755, 61.8), (67.279, 57.4)}
    assert ax.get_ylim()[0] == 0.0 and ax.get_xlim()[0] == 0.0
    # the latency curves: the SLO on the TTFT panel only, the max rate's step on every panel
    curves = next(p for p in rest if p.key == "latency-vs-rate").figure.axes
    assert _hlines(curves[0]) == [60.0] and _hlines(curves[1]) == [] and _hlines(curves[2]) == []
    assert all(47.7 in _vlines(a) for a in curves)
    html = open(write_sweep_report(str(tmp_path), _search_doc())).read()
    assert html.index('id="plot-max-rate"') < html.index('id="steps"')  # the answer before the table


def test_a_sweep_with_an_slo_marks_its_highest_step_within_it() -> None:
    steps = _steps([20.0, 30.0, 80.0], [5.0, 19.5, 37.7])
    plot = curves_figure(steps, {"ttft": 40.0}, 99.0, (19.5, "highest within the SLO: 19.5 req/s"))
    assert plot is not None
    ttft, tpot, _ = plot.figure.axes
    assert _hlines(ttft) == [40.0] and _hlines(tpot) == []
    assert all(_vlines(a) == {19.5: "highest within the SLO: 19.5 req/s"} for a in plot.figure.axes)
    # at a percentile that is neither p50 nor p99, the judged values are drawn too
    for s, v in zip(steps, (25.0, 35.0, 90.0), strict=True):
        s["judgement"] = {"slo_values_ms": {"ttft": v}}
    plot = curves_figure(steps, {"ttft": 40.0}, 90.0, None)
    assert plot is not None
    p90 = [ln for ln in plot.figure.axes[0].get_lines() if ln.get_label() == "TTFT p90"]
    assert len(p90) == 1 and np.asarray(p90[0].get_ydata()).tolist() == [25.0, 35.0, 90.0]
    assert not _vlines(plot.figure.axes[0])  # no answer: no line


def _header(html: str) -> list[str]:
    import re

    table = html[html.index('id="steps"') : html.index("</table>")]
    return re.findall(r"<th[^>]*>([^<]*)</th>", table)


def test_no_column_of_the_report_table_is_all_na(tmp_path: Any) -> None:
    doc: dict[str, Any] = {
        "kind": "rates_sweep",
        "sweep": "rates:1,2",
        "host": "h",
        "steps": _steps([20.0, 21.0]),
    }
    html = open(write_sweep_report(str(tmp_path), doc)).read()
    header = _header(html)
    for absent in ("startup s", "E2EL p99", "$/1M out tok", "verdict"):  # no step has one
        assert absent not in header
    assert "TTFT p50" in header and "failed" in header  # 0 failures is a number: kept
    md = open(tmp_path / "report" / "report.md").read()
    assert "n/a" not in md and "E2EL p99" not in md
    # one step with a value brings the column back, n/a where the other lacks it
    doc["steps"][1]["e2el_p99_ms"] = 700.0
    html = open(write_sweep_report(str(tmp_path), doc)).read()
    assert "E2EL p99" in _header(html) and "n/a" in html


SLO = "(ttft:40ms at p99, failures <= 1.0%)"


@pytest.mark.parametrize(
    ("verdicts", "expect"),
    [
        (
            ["holds", "holds", "fails"],
            f"Highest load within the SLO {SLO}: rate 19.5 (19.5 req/s achieved); the next load, rate 37.7 "
            "(37.7 req/s), missed it: p99 TTFT 51.2 ms > 40 ms.",
        ),
        (
            ["holds", "holds", "holds"],
            f"Every step held the SLO {SLO}, the heaviest too: rate 37.7 (37.7 req/s ",
        ),
        (
            ["fails", "fails", "fails"],
            f"No step held the SLO {SLO}: the lightest, rate 5 (5 req/s), missed it",
        ),
        # only a lighter step failed: the answer says so rather than "every step held"
        (
            ["fails", "holds", "holds"],
            f"Highest load within the SLO {SLO}: rate 37.7 (37.7 req/s achieved); but a lighter load, rate 5",
        ),
    ],
)
def test_the_sweep_answer_on_labelled_cases(verdicts: list[str], expect: str) -> None:
    from orchestration.report.sweep_answer import sweep_headline

    # the heaviest load is the first step by its achieved rate: the order is the load asked (the target)
    steps = _steps([20.0, 30.0, 80.0], [5.0, 19.5, 37.7])
    for s, v in zip(steps, verdicts, strict=True):
        s["verdict"] = v
        s["judgement"] = {"reasons": [] if v == "holds" else ["p99 TTFT 51.2 ms > 40 ms"]}
    doc = {
        "kind": "rates_sweep",
        "steps": steps,
        "slo_ms": {"ttft": 40.0},
        "slo_percentile": 99.0,
        "max_error_rate": 0.01,
    }
    (line,) = sweep_headline(doc)
    assert line.startswith(expect), line


def test_the_heaviest_load_is_the_target_not_the_achieved_rate() -> None:
    from orchestration.report.sweep_answer import slo_answer

    # an overloaded step that completed fewer requests per second than the lighter one still came after it
    steps = _steps([20.0, 400.0], [2.0, 4.0])
    steps[1]["achieved_rate"] = 1.5
    steps[0]["verdict"], steps[1]["verdict"] = "holds", "fails"
    best, miss = slo_answer({"steps": steps})
    assert best is steps[0] and miss is steps[1]
    auto = [
        {"kind": "throughput", "target": None, "verdict": "fails", "achieved_rate": 9.0},
        {"kind": "synchronous", "target": None, "verdict": "holds", "achieved_rate": 1.0},
        {"kind": "rate", "target": 5.0, "verdict": "holds", "achieved_rate": 4.9},
    ]
    best, miss = slo_answer({"steps": auto})
    assert best is auto[2] and miss is auto[0]


def test_the_sweep_answer_without_an_slo() -> None:
    from orchestration.report.sweep_answer import sweep_headline

    doc = {"kind": "rates_sweep", "steps": _steps([20.0, 30.0], [5.0, 19.5])}
    assert sweep_headline(doc) == [
        "Peak output throughput: 101.0 tok/s at step rate 19.5 (19.5 req/s).",
        "At the lightest load, rate 5 (5 req/s): TTFT p50 20 ms, TPOT p50 10 ms.",
    ]


def test_a_search_report_asked_as_pdf_writes_the_headline_and_every_step(tmp_path: Any) -> None:
    """`vllm-locust report SEARCH_DIR --format pdf`: the PDF holds the answer and one row per step."""
    pypdf = pytest.importorskip("pypdf", reason="pypdf is in the test extra (pip install -e '.[test]')")
    from orchestration.report.run_sets import search_headline

    doc = _search_doc()
    first = write_sweep_report(str(tmp_path), doc, formats=["pdf"])
    assert first.endswith("report.pdf") and not (tmp_path / "report" / "report.html").exists()
    text = "".join("".join(p.extract_text().split()) for p in pypdf.PdfReader(first).pages)
    for line in search_headline(doc):
        assert "".join(line.split()) in text
    for s in doc["steps"]:
        assert "".join(str(s["name"]).split()) in text
