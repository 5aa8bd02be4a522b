"""The servers' own error messages and compressed streams, from records to result.json, the console summary and
the HTML report (escaped: a server's message is not markup)."""

from __future__ import annotations

from pathlib import Path

from orchestration.report.model import build_report
from orchestration.report.postprocess import load_run
from orchestration.report.render import render_html
from orchestration.report.summary import format_summary
from tests.unit.report.helpers import make_records, write_run


def test_error_messages_and_compression_reach_the_summary_and_the_report(tmp_path: Path) -> None:
    recs = make_records(40)
    for i, r in enumerate(recs[:5]):
        r.error, r.error_detail = (
            ("inband_error", "upstream <b>overloaded</b>") if i < 3 else ("http", "HTTP 503: busy")
        )
    for r in recs[10:30]:
        r.extra = {"content_encoding": "gzip"}
    run = load_run(write_run(str(tmp_path / "a"), recs))
    res = run.result
    assert res["error_messages"] == [
        {"kind": "inband_error", "message": "upstream <b>overloaded</b>", "count": 3},
        {"kind": "http", "message": "HTTP 503: busy", "count": 2},
    ]
    assert res["compressed_streams"] == {"gzip": 20}
    text = format_summary(res)
    assert "3 x inband_error: upstream <b>overloaded</b>" in text and "gzip=20" in text
    html = render_html(build_report([run]), [])
    assert "upstream &lt;b&gt;overloaded&lt;/b&gt;" in html and "<b>overloaded" not in html
    assert "Compressed by the server (decoded)" in html
    clean = load_run(write_run(str(tmp_path / "b"), make_records(40)))
    assert (
        "error_messages" not in clean.result and "compressed_streams" not in clean.result
    )  # absent, not empty
