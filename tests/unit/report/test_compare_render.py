"""Compare (direction, % change, mismatches) and the HTML/Markdown/JSON/PDF renderers."""

from __future__ import annotations

import json
import os
import re

import pytest

from orchestration.commands.report import main
from orchestration.report.compare import compare, direction
from orchestration.report.model import build_report
from orchestration.report.plots import all_plots, cdf_points
from orchestration.report.postprocess import load_run
from orchestration.report.render import render_html, render_markdown
from tests.unit.report.helpers import make_records, server_samples, write_run


def test_direction() -> None:
    assert direction("p99_ttft_ms") == "lower"
    assert direction("output_throughput") == "higher"
    assert direction("request_goodput") == "higher"
    assert direction("failed") is None and direction("completed") is None  # counts follow the run's length
    assert direction("server_prefix_cache_hit_rate") == "higher"
    assert direction("chunk_token_ratio") is None


def test_compare_changes_and_verdicts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a = load_run(write_run(str(tmp_path / "a"), make_records(100, ttft_ms=40)))
    b = load_run(write_run(str(tmp_path / "b"), make_records(100, ttft_ms=20), meta={"model_id": "other"}))
    c = compare([a, b])
    row = next(r for r in c["rows"] if r["metric"] == "median_ttft_ms")
    ch = row["changes"][0]
    assert ch["abs"] == pytest.approx(row["values"][1] - row["values"][0])
    assert ch["pct"] == pytest.approx(ch["abs"] / row["values"][0] * 100)
    assert ch["significance"]["significant"] and ch["verdict"] == "better"  # TTFT halved, tested
    thr = next(r for r in c["rows"] if r["metric"] == "output_throughput")
    assert thr["changes"][0]["verdict"] == "not tested"  # one value per run: no test, so no verdict
    assert [d["setting"] for d in c["setup_differences"]] == ["model_id"]


def _cell(html: str, metric: str) -> str:
    table = html[html.index('id="compare-table"') :]
    m = re.search(
        rf'data-key="{metric}">(?:(?!</tr>).)*?<td class="(\w+)" data-verdict="([^"]+)"', table, re.S
    )
    assert m, metric
    return f"{m.group(1)}:{m.group(2)}"


def test_verdicts_are_true_in_every_format(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A difference that is not significant is neither better nor worse; counts are neither; the setup
    difference comes before any difference; HTML, Markdown and PDF say the same verdict."""
    a = load_run(write_run(str(tmp_path / "a"), make_records(100, ttft_ms=40, seed=1)))
    b = load_run(
        write_run(
            str(tmp_path / "b"), make_records(200, ttft_ms=40 * 0.965, seed=2), meta={"num_prompts": 200}
        )
    )
    c = compare([a, b])
    rows = {r["metric"]: r["changes"][0] for r in c["rows"]}
    ttft = rows["median_ttft_ms"]
    assert ttft["pct"] == pytest.approx(-3.5, abs=1.0) and ttft["significance"]["significant"] is False
    assert ttft["verdict"] == "no significant difference"
    assert rows["completed"]["abs"] == 100 and rows["completed"]["verdict"] == "neutral"
    assert c["setup_differences"][0]["setting"] == "num_prompts"
    rep = build_report([a, b])
    html = render_html(rep, [])
    assert _cell(html, "median_ttft_ms") == "neutral:no significant difference"
    assert _cell(html, "completed") == "neutral:neutral"
    setup = html.index('id="setup-differences"')
    assert setup < html.index('id="compare-table"') and "num prompts: a=100, b=200" in html[setup:]
    md = render_markdown(rep)
    assert md.index("setups differ") < md.index("### Comparison") and "no significant difference" in md
    assert not re.search(r"\| completed \|[^\n]*(better|worse)", md)


def test_pdf_says_the_html_verdict(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pypdf = pytest.importorskip("pypdf", reason="pypdf is in the test extra")
    from orchestration.report.render import render_pdf

    a = load_run(write_run(str(tmp_path / "a"), make_records(100, ttft_ms=40, seed=1)))
    b = load_run(write_run(str(tmp_path / "b"), make_records(100, ttft_ms=40 * 0.965, seed=2)))
    rep = build_report([a, b])
    render_pdf(rep, [], str(tmp_path / "r.pdf"))
    text = "\n".join(p.extract_text() for p in pypdf.PdfReader(str(tmp_path / "r.pdf")).pages)
    # the comparison row: metric, both values, then the change, its verdict and its test, one cell after another
    row = text[text.index("median_ttft_ms") :].split("std_ttft_ms")[0]
    assert "no significant difference" in row and "not significant (Mann-Whitney U, p=" in row
    assert "better" not in row.replace("(lower is better)", "")
    assert _cell(render_html(rep, []), "median_ttft_ms") == "neutral:no significant difference"


def test_identical_findings_are_said_once_with_their_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runs = [load_run(write_run(str(tmp_path / n), make_records(100, fail=5))) for n in ("a", "b", "c")]
    rep = build_report(runs)
    assert [f.rule for f in rep.findings].count("failures") == 3
    html = render_html(rep, [])
    assert html.count('data-rule="failures"') == 1 and 'data-runs="a,b,c"' in html
    md = render_markdown(rep)
    assert md.count("**Requests failed**") == 1 and "(a, b, c, critical)" in md


def test_no_rule_fired_is_never_said_beside_a_finding() -> None:
    """The start-up tail of a labelled run is an informational finding: "no problem", not "no rule fired"."""
    import json

    from tests.labelled_runs import FIXTURES, load_fixture

    runs = load_fixture(json.loads((FIXTURES / "startup_tail.json").read_text()))
    rep = build_report(runs)
    assert [f.severity for f in rep.findings] == ["info"]
    for text in (render_html(rep, []), render_markdown(rep)):
        assert "No rule fired" not in text and "No problem found" in text


def test_report_leads_with_the_load_and_the_verdict(tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = load_run(write_run(str(tmp_path / "a"), make_records(100, fail=5), meta={"num_prompts": 100}))
    html = render_html(build_report([run]), [])
    head = html.index('id="headline-table"')
    assert head < html.index('id="diagnosis"') < html.index('id="summary"')
    row = html[head : html.index("</table>", head)]
    assert "8 users (closed loop)" in row and "100 prompts" in row and "input 100 / output 16 tokens" in row
    assert "1 problem (critical): Requests failed" in row


def test_cdf_points_downsample_but_keep_tails() -> None:
    import numpy as np

    v = np.concatenate([np.full(999_000, 0.01), np.full(1000, 1.0)])
    x, y = cdf_points(v)
    assert len(x) < 600
    assert x[-1] == pytest.approx(1000.0) and x[0] == pytest.approx(10.0)


def test_html_is_self_contained_and_matches_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = load_run(write_run(str(tmp_path / "a"), make_records(100, fail=3), samples=server_samples()))
    rep = build_report([run])
    html = render_html(rep, all_plots([run]))
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert html.count("data:image/png;base64,") >= 2  # CDFs and the time series
    m = re.search(r'data-key="median_ttft_ms"><td class="l">[^<]*</td>\s*<td>([^<]+)</td>', html)
    assert m and m.group(1) == f"{run.result['median_ttft_ms']:.2f}"
    assert 'data-rule="failures"' in html
    md = render_markdown(rep)
    assert f"| Median TTFT (ms) | {run.result['median_ttft_ms']:.2f} |" in md
    assert "Prefix cache hit rate (server) | 80.0%" in md
    # every server TTFT in its 10-20 ms bucket: the p50 and p99 are that bucket, not 15.00 / 19.90 interpolated
    assert "TTFT server p50 / p99 (ms, the buckets they fall in) | 10-20 / 10-20 |" in md


def test_cli_all_formats_and_exit_codes(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    a = write_run(str(tmp_path / "a"), make_records(60))
    b = write_run(str(tmp_path / "b"), make_records(60, ttft_ms=30, turns=3))
    out = str(tmp_path / "out")
    assert main([a, b, str(tmp_path / "missing"), "-o", out, "--format", "html,pdf,json,md"]) == 0
    assert sorted(os.listdir(out)) == ["report.html", "report.json", "report.md", "report.pdf"]
    data = json.load(open(os.path.join(out, "report.json")))
    assert [r["name"] for r in data["runs"]] == ["a", "b"]
    assert data["comparison"]["baseline"] == "a"
    assert "does not exist" in data["failed_inputs"][0]
    assert open(os.path.join(out, "report.pdf"), "rb").read(5) == b"%PDF-"
    assert "does not exist" in capsys.readouterr().err
    assert main([str(tmp_path / "missing"), "-o", out]) == 2  # nothing to report
    assert main([a, "--format", "docx"]) == 2
    assert main([a, "--goodput", "ttft:abc"]) == 2


def test_default_output_dir_is_inside_the_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a = write_run(str(tmp_path / "a"), make_records(20))
    assert main([a, "--quiet"]) == 0
    assert os.path.exists(os.path.join(a, "report", "report.html"))


def test_report_after_run_never_raises(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from orchestration.report.generate import report_after_run

    report_after_run(str(tmp_path / "nope"))  # must not raise
    assert "error" in capsys.readouterr().err


def test_chosen_percentiles_reach_summary_report_and_compare(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestration.report.summary import format_summary

    meta = {"percentile_metrics": "ttft,itl,e2el", "metric_percentiles": "50,90,99,99.9"}
    a = load_run(write_run(str(tmp_path / "a"), make_records(100, tail_every=10), meta=meta))
    b = load_run(write_run(str(tmp_path / "b"), make_records(100)))  # vLLM's defaults: p99 of ttft,tpot,itl
    res = a.result
    assert [k for k in res if k.endswith("_ttft_ms") and k[1].isdigit()] == [
        "p50_ttft_ms",
        "p90_ttft_ms",
        "p99_ttft_ms",
        "p99.9_ttft_ms",
    ]
    assert "p99_tpot_ms" not in res and "p99.9_e2el_ms" in res
    text = format_summary(res)
    for line in ("P50 TTFT (ms):", "P99.9 TTFT (ms):", "P90 ITL (ms):", "P99.9 E2EL (ms):"):
        assert line in text, line
    assert f"{'P99.9 TTFT (ms):':<40}{res['p99.9_ttft_ms']:<10.2f}" in text
    assert "P99 TPOT" not in text and "TPOT (ms):" in text  # TPOT keeps mean and median, no percentiles
    assert "P99 TPOT (ms):" in format_summary(b.result) and "P90 TTFT" not in format_summary(b.result)
    md = render_markdown(build_report([a, b]))
    assert f"| P99.9 TTFT (ms) | {res['p99.9_ttft_ms']:.2f} | n/a |" in md
    assert f"| P99 TPOT (ms) | n/a | {b.result['p99_tpot_ms']:.2f} |" in md
    names = [r["metric"] for r in compare([a, b])["rows"]]
    assert names.index("p50_ttft_ms") < names.index("p99_ttft_ms") < names.index("p99.9_ttft_ms")
    assert "p99.9_e2el_ms" in names and "p99_tpot_ms" in names


def test_a_folder_of_runs_reports_the_runs_inside(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "results"
    write_run(str(results / "20260101-000000-chat"), make_records(30, ttft_ms=40))
    write_run(str(results / "20260102-000000-chat"), make_records(30, ttft_ms=20))
    (results / "notes").mkdir()  # not a run: left out
    (results / "stray.txt").write_text("x")
    out = str(tmp_path / "out")
    assert main([str(results) + "/", "-o", out, "--format", "json"]) == 0
    data = json.load(open(os.path.join(out, "report.json")))
    assert [r["name"] for r in data["runs"]] == [
        "20260101-000000-chat",
        "20260102-000000-chat",
    ]  # oldest first
    assert data["comparison"]["baseline"] == "20260101-000000-chat" and not data["failed_inputs"]
    # one run inside: its own report directory, as for the run itself
    single = tmp_path / "single"
    write_run(str(single / "only"), make_records(10))
    assert main([str(single), "--quiet"]) == 0
    assert os.path.exists(single / "only" / "report" / "report.html")
    # an empty folder still says why there is nothing to report
    (tmp_path / "empty").mkdir()
    capsys.readouterr()
    assert main([str(tmp_path / "empty")]) == 2
    assert "no run directories inside it" in capsys.readouterr().err
