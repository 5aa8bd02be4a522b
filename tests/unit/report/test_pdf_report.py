"""The PDF report says what the HTML report says: the same sections in the same order, every table cell in full
(no cut column name, no cut value), the verdicts and every finding, and a figure page naming its run; its tables fit
the page. The HTML report, rendered from the same model, is the reference."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from typing import Any

import pytest

pypdf = pytest.importorskip("pypdf", reason="pypdf is in the test extra (pip install -e '.[test]')")

from orchestration.report.model import Report, build_report  # noqa: E402
from orchestration.report.plots import all_plots  # noqa: E402
from orchestration.report.postprocess import load_run  # noqa: E402
from orchestration.report.render import render_html, render_pdf  # noqa: E402
from tests.unit.report.helpers import make_records, server_samples, write_run  # noqa: E402

LONG = "baseline-run-with-a-name-longer-than-any-column-of-the-old-page"


class _Html(HTMLParser):
    """The HTML report's tables (rows of cell texts) and its <h2> section titles, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.h2: list[str] = []
        self._cell: list[str] | None = None
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "h2":
            self._in_h2, self._cell = True, []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "h2" and self._cell is not None:
            self.h2.append(" ".join("".join(self._cell).split()))
            self._in_h2, self._cell = False, None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _squash(s: str) -> str:
    """Text without whitespace: a cell that wraps onto two lines still reads as one string."""
    return re.sub(r"\s+", "", s)


def _pdf(report: Report, path: str, plots: list[Any] | None = None) -> Any:
    render_pdf(report, plots or [], path)
    return pypdf.PdfReader(path)


def _outline(reader: Any) -> list[tuple[int, str]]:
    """(level, title) of every bookmark, depth first."""
    out: list[tuple[int, str]] = []

    def walk(items: list[Any], level: int) -> None:
        for it in items:
            if isinstance(it, list):
                walk(it, level + 1)
            else:
                out.append((level, it.title))

    walk(reader.outline, 0)
    return out


def _check_same_content(report: Report, reader: Any) -> str:
    """Every HTML table row appears in the PDF, cell after cell and in full; the sections come in the HTML's
    order. Returns the PDF's text."""
    html = _Html()
    html.feed(render_html(report, []))
    pdf_text = "\n".join(p.extract_text() for p in reader.pages)
    flat = _squash(pdf_text)
    assert html.tables
    for rows in html.tables:
        for row in rows:
            assert all(cell in pdf_text or _squash(cell) in flat for cell in row), row
            assert _squash("".join(row)) in flat, f"row not whole in the PDF: {row}"
    sections = [title for level, title in _outline(reader) if level == 1]
    assert sections == html.h2
    return pdf_text


@pytest.fixture
def two_runs(tmp_path: Any) -> list[Any]:
    a = write_run(
        str(tmp_path / LONG),
        make_records(200, tail_every=25, tail_ms=400, turns=3),
        samples=server_samples(),
    )
    b = write_run(
        str(tmp_path / "next"), make_records(200, ttft_ms=12, fail=6), samples=server_samples(hits_ratio=0.3)
    )
    return [load_run(a), load_run(b)]


def test_single_run_pdf_has_every_cell_verdict_and_finding(two_runs: list[Any], tmp_path: Any) -> None:
    report = build_report(two_runs[:1])
    reader = _pdf(report, str(tmp_path / "one.pdf"))
    text = _check_same_content(report, reader)
    flat = _squash(text)
    [(name, load, verdict)] = report.headline()
    assert verdict.startswith("1 problem (warning)")
    assert _squash(name + load + verdict) in flat  # the lead row: run, its load and its verdict, whole
    groups = report.finding_groups()
    assert [g.rule for g in groups] == ["ttft_fluctuation"]
    for g in groups:
        for part in (g.title, g.threshold, *g.evidence_lines(), g.action):
            assert _squash(part) in flat, part


def test_comparison_pdf_has_every_cell_verdict_and_finding(two_runs: list[Any], tmp_path: Any) -> None:
    report = build_report(two_runs)
    assert report.comparison
    reader = _pdf(report, str(tmp_path / "two.pdf"))
    flat = _squash(_check_same_content(report, reader))
    for name, load, verdict in report.headline():
        assert _squash(name + load + verdict) in flat
    assert {g.rule for g in report.finding_groups()} == {"ttft_fluctuation", "failures"}
    for g in report.finding_groups():
        for part in (g.title, g.threshold, *g.evidence_lines(), g.action):
            assert _squash(part) in flat, part
    # the significant TTFT drop is "better", with its test named under it, as in the HTML
    row = next(r for r in report.comparison["rows"] if r["metric"] == "median_ttft_ms")
    assert row["changes"][0]["verdict"] == "better"
    assert _squash("better" + "significant (Mann-Whitney U") in flat


def test_figure_pages_name_their_run(two_runs: list[Any], tmp_path: Any) -> None:
    """Each run's time series is on a page that names the run, under its caption."""
    report = build_report(two_runs)
    reader = _pdf(report, str(tmp_path / "plots.pdf"), all_plots(two_runs))
    for r in two_runs:
        pages = [p for p in reader.pages if f"Over time: {r.name}" in p.extract_text()]
        assert len(pages) == 1 and len(pages[0].images) == 1, r.name
    assert (2, f"Over time: {LONG}") in _outline(reader)


def test_pdf_table_words_stay_on_the_page(two_runs: list[Any], tmp_path: Any) -> None:
    """No word of the PDF ends past the right margin (poppler's word boxes), even with many runs' columns."""
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext not installed (apt-get install -y poppler-utils)")
    more = [two_runs[0], two_runs[1]]
    for i in range(4):  # six runs: 1 + 6 + 5 columns in the comparison
        more.append(load_run(write_run(str(tmp_path / f"{LONG}-{i}"), make_records(60, seed=i + 1))))
    path = str(tmp_path / "wide.pdf")
    _pdf(build_report(more), path)
    out = subprocess.run(["pdftotext", "-bbox", path, "-"], capture_output=True, text=True, check=True).stdout
    page_w = float(re.search(r'<page width="([\d.]+)"', out).group(1))  # type: ignore[union-attr]
    right = [float(x) for x in re.findall(r'xMax="([\d.]+)"', out)]
    assert right and max(right) <= page_w - 30  # inside the 1.4 cm margin, give or take a few points


def test_column_widths_fill_and_respect_the_longest_word() -> None:
    from orchestration.report.pdf_layout import column_widths

    assert column_widths([50, 60], [20, 30], 200) == [50, 60]  # they fit: each its natural width
    w = column_widths([400, 300, 40], [60, 50, 30], 500)
    assert sum(w) == pytest.approx(500, abs=0.01) and w[2] == 40 and w[0] == pytest.approx(w[1])
    w = column_widths([400, 300], [300, 300], 500)  # words alone overflow: scaled, they split
    assert sum(w) == pytest.approx(500)


def test_pdf_backend_is_imported_only_for_a_pdf() -> None:
    """An HTML or Markdown report does not pay for ReportLab."""
    code = (
        "import sys, orchestration.report.generate, orchestration.report.render;"
        "assert 'reportlab' not in sys.modules and 'orchestration.report.render_pdf' not in sys.modules"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, timeout=60)
