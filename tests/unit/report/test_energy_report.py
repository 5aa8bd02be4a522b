"""The report's GPU energy: a section in HTML, Markdown and the PDF's story from result.json's `energy`, and the
power/utilisation panel under the throughput over time; none without --gpu-metrics."""

from __future__ import annotations

from pathlib import Path

from orchestration.report.energy_plot import gpu_series
from orchestration.report.model import build_report
from orchestration.report.plots import timeseries_figure
from orchestration.report.postprocess import load_run
from orchestration.report.render import render_html, render_markdown
from tests.unit.report.helpers import make_records, write_run
from vllm_users.measure import metric_keys as K
from vllm_users.measure.energy import energy_block
from vllm_users.measure.gpu_metric_names import ENERGY, POWER, UTIL


def _energy(t0: float, t1: float) -> dict[str, object]:
    s = {
        ENERGY: [(t0 - 1, 0.0), (t1 + 1, 300.0 * (t1 - t0 + 2))],
        POWER: [(t0 - 1, 300.0), (t0 + (t1 - t0) / 2, 300.0), (t1 + 1, 300.0)],
        UTIL: [(t0 - 1, 0.0), (t0 + (t1 - t0) / 2, 90.0), (t1 + 1, 0.0)],
    }
    return energy_block({"node-a:0": s}, t0, t1, output_tokens=1000, requests=40, energy_price=0.2)


def test_the_report_shows_the_gpus(tmp_path: Path) -> None:
    run = load_run(write_run(str(tmp_path / "a"), make_records(40)))
    plain = build_report([run])
    assert "GPU energy" not in render_html(plain, []) and "GPU energy" not in render_markdown(plain)
    ts = run.timeseries or {}
    t0 = float(ts.get("t0") or 0.0)
    run.result["energy"] = _energy(t0, t0 + 10.0)
    rep = build_report([run])
    html = render_html(rep, [])
    assert "GPU energy: a" in html and "Energy per output token (J)" in html
    md = render_markdown(rep)
    assert "### GPU energy: a" in md
    assert f"{run.result['energy'][K.ENERGY_J]:.1f}" in md  # 3000.0 J: 300 W for the 10 s window
    assert run.result["energy"][K.ENERGY_J] == 3000.0


def test_the_over_time_figure_gets_a_gpu_panel(tmp_path: Path) -> None:
    run = load_run(write_run(str(tmp_path / "a"), make_records(40)))
    before = timeseries_figure(run)
    assert before is not None
    ts = run.timeseries or {}
    t0 = float(ts.get("t0") or 0.0)
    run.result["energy"] = _energy(t0, t0 + 10.0)
    assert gpu_series(run.result) is not None
    after = timeseries_figure(run)
    assert after is not None
    assert len(after.figure.axes) > len(before.figure.axes)
    titles = [a.get_title() for a in after.figure.axes]
    assert "GPU power and utilisation (--gpu-metrics)" in titles
