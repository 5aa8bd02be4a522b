"""The report's "Replay fidelity" section (HTML table, Markdown line) from result.json's `replay`; none without."""

from __future__ import annotations

from pathlib import Path

from orchestration.report.model import build_report
from orchestration.report.postprocess import load_run
from orchestration.report.render import render_html, render_markdown
from tests.unit.report.helpers import make_records, write_run

REPLAY = {
    "trace": "t.jsonl",
    "format": "mooncake",
    "time_scale": 2.0,
    "trace_requests": 50,
    "scheduled": 50,
    "sent": 49,
    "dropped": 1,
    "not_sent": 1,
    "all_sent": False,
    "lag_ms": {"p50": 1.25, "p90": 2.0, "p99": 4.75, "max": 9.5, "mean": 1.5},
    "expected_block_reuse": 0.625,
    "server_prefix_hit_rate": 0.6,
    "reuse_gap_points": -2.5,
}


def test_the_report_shows_the_replay(tmp_path: Path) -> None:
    run = load_run(write_run(str(tmp_path / "a"), make_records(40)))
    plain = build_report([run])
    assert 'id="replay"' not in render_html(plain, []) and "Replay fidelity" not in render_markdown(plain)
    run.result["replay"] = REPLAY
    rep = build_report([run])
    html = render_html(rep, [])
    table = html[html.index('id="replay-table"') :].split("</table>")[0]
    for cell in (
        "mooncake: t.jsonl",
        "<td>50</td>",
        "<td>49</td>",
        "1.25",
        "4.75",
        "9.50",
        "62.5 %",
        "60.0 %",
    ):
        assert cell in table, cell
    md = render_markdown(rep)
    assert "Replay fidelity of a:" in md and "50 / 49 / 1" in md and "62.5% / 60.0%" in md
