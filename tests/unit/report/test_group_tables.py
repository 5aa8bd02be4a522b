"""Per-model tables in the HTML, Markdown and PDF reports from one definition, and the client's health said in
the console summary's words (never a bare "client-bound: unknown")."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from orchestration.report.group_tables import breakdown_text, client_health_line, group_tables
from orchestration.report.model import build_report
from orchestration.report.postprocess import load_run
from orchestration.report.render import render_html, render_markdown
from tests.unit.report.helpers import make_records, write_run


def _mixed_run(tmp_path: Any) -> Any:
    """A run of two served models: lora-a's requests have a TTFT 5 x the base's."""
    base = make_records(60, ttft_ms=20.0, seed=1)
    slow = [dataclasses.replace(r, model="lora-a") for r in make_records(20, ttft_ms=100.0, seed=2)]
    path = write_run(str(tmp_path / "mix"), base + slow, meta={"model_id": "m:3,lora-a:1"})
    return load_run(path)


def test_a_model_mix_gets_one_row_per_model_and_no_all_na_column(tmp_path: Any) -> None:
    run = _mixed_run(tmp_path)
    [t] = group_tables(run.result, run.name)
    assert t.title == f"Per model: {run.name}" and t.header[0] == "Model"
    rows = {row[0]: dict(zip(t.header, row, strict=True)) for row in t.rows}
    assert set(rows) == {"m", "lora-a"}
    assert rows["m"]["ok"] == "60" and rows["lora-a"]["ok"] == "20"
    assert float(rows["lora-a"]["TTFT p50"]) == pytest.approx(5 * float(rows["m"]["TTFT p50"]), rel=0.15)
    assert "goodput (req/s)" not in t.header  # no --goodput: no model has it, so no column of n/a
    assert all("n/a" not in row for row in t.rows)


def test_one_model_has_no_table(tmp_path: Any) -> None:
    run = load_run(write_run(str(tmp_path / "one"), make_records(40)))
    assert run.result.get("per_model") is None and group_tables(run.result, run.name) == []


def test_html_and_markdown_show_the_same_per_model_rows(tmp_path: Any) -> None:
    run = _mixed_run(tmp_path)
    report = build_report([run])
    html, md = render_html(report, []), render_markdown(report)
    [t] = group_tables(run.result, run.name)
    assert f"<h2>{t.title}</h2>" in html and f"### {t.title}" in md
    for row in t.rows:
        cells = [f'<td class="l">{row[0]}</td>', *(f"<td>{c}</td>" for c in row[1:])]
        assert "".join(cells) in html
        assert "| " + " | ".join(row) + " |" in md


def test_health_says_the_verdict_not_unknown(tmp_path: Any) -> None:
    run = load_run(write_run(str(tmp_path / "one"), make_records(40)))
    html = render_html(build_report([run]), [])
    assert "client-bound: unknown" not in html
    assert f"client: {client_health_line(run.result)}" in html
    assert client_health_line({}) == "not measured (no worker reported its health)"
    healthy = {"client_health": {"verdict": "ok", "workers": {}}}
    assert client_health_line(healthy).startswith("ok")


def test_pdf_shows_the_same_per_model_rows(tmp_path: Any) -> None:
    pypdf = pytest.importorskip("pypdf", reason="pypdf is in the test extra (pip install -e '.[test]')")
    from orchestration.report.render import render_pdf

    run = _mixed_run(tmp_path)
    path = str(tmp_path / "r.pdf")
    render_pdf(build_report([run]), [], path)
    text = "".join("".join(p.extract_text().split()) for p in pypdf.PdfReader(path).pages)
    [t] = group_tables(run.result, run.name)
    assert "".join(t.title.split()) in text
    for row in t.rows:
        assert "".join("".join(row).split()) in text, row


def _fleet_run(tmp_path: Any) -> Any:
    """Requests over two endpoints, b's TTFT 4 x a's, and a where-a-TTFT-goes block from the server's histograms."""
    a = [dataclasses.replace(r, host="10.0.0.1:8000") for r in make_records(40, ttft_ms=20.0, seed=1)]
    b = [dataclasses.replace(r, host="10.0.0.2:8000") for r in make_records(40, ttft_ms=80.0, seed=2)]
    breakdown = {
        "client": {"ttft_mean_ms": 52.0, "ttft_p50_ms": 50.0, "tpot_mean_ms": 10.0},
        "servers": [
            {"url": "http://10.0.0.1:8000/metrics", "ttft": {"engine": {"mean_ms": 30.0, "count": 80}}}
        ],
    }
    path = write_run(str(tmp_path / "fleet"), a + b, extra={"latency_breakdown": breakdown})
    return load_run(path)


def test_a_fleet_gets_its_endpoint_table_with_the_imbalance_and_where_a_ttft_goes(tmp_path: Any) -> None:
    pypdf = pytest.importorskip("pypdf", reason="pypdf is in the test extra (pip install -e '.[test]')")
    from orchestration.report.render import render_pdf

    run = _fleet_run(tmp_path)
    [t] = group_tables(run.result, run.name)
    assert t.title.startswith("Per endpoint") and [row[0] for row in t.rows] == [
        "10.0.0.1:8000",
        "10.0.0.2:8000",
    ]
    rows = {row[0]: dict(zip(t.header, row, strict=True)) for row in t.rows}
    assert rows["10.0.0.1:8000"]["share"] == rows["10.0.0.2:8000"]["share"] == "50.0 %"
    assert float(rows["10.0.0.2:8000"]["TTFT p50"]) > 3 * float(rows["10.0.0.1:8000"]["TTFT p50"])
    [note] = t.notes
    assert (
        note.startswith("imbalance: request share max/min 1.00") and "(10.0.0.2:8000 / 10.0.0.1:8000)" in note
    )
    report = build_report([run])
    html, md = render_html(report, []), render_markdown(report)
    lines = breakdown_text(run.result)
    assert lines and "client TTFT" in lines[2]
    assert note in html and note in md
    assert f"<h2>Where a TTFT goes: {run.name}</h2>" in html and "\n".join(lines) in html.replace(
        "&#39;", "'"
    )
    assert "\n".join(lines) in md
    path = str(tmp_path / "r.pdf")
    render_pdf(report, [], path)
    text = "".join("".join(p.extract_text().split()) for p in pypdf.PdfReader(path).pages)
    assert "".join(note.split()) in text and "".join(lines[2].split()) in text
