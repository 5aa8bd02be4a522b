"""Warm-up / cool-down windows: parsing, which requests they flag, and statistics that leave them out."""

from __future__ import annotations

import os

import numpy as np
import pytest

from orchestration.report import diagnose as dg
from orchestration.report.postprocess import load_run
from orchestration.report.summary import format_summary
from tests.unit.report.helpers import make_records, write_run
from vllm_users.measure.columns import columns_from_records
from vllm_users.measure.metrics import rows
from vllm_users.measure.result_builder import build_result
from vllm_users.measure.windows import COOLDOWN, MEASURED, WARMUP, Window, phases


def test_parse() -> None:
    assert Window.parse("30s").seconds == 30 and Window.parse("2m").seconds == 120
    assert Window.parse("1m30s").seconds == 90 and Window.parse("200r").requests == 200
    assert Window.parse("0s").empty
    for bad in ("", "abc", "30x", "-5s", "r", "2r3"):
        with pytest.raises(ValueError):
            Window.parse(bad)


def _slow_start(n: int = 200, slow: int = 8) -> list:  # type: ignore[type-arg]
    """8 lanes; the first `slow` requests have a 2 s TTFT (the start-up burst), the rest ~20 ms."""
    recs = make_records(n, ttft_ms=20.0)
    t0 = recs[0].t_start
    for r in sorted(recs, key=lambda r: r.t_start)[:slow]:
        r.chunk_times_us = [c + 2_000_000 for c in r.chunk_times_us]
        r.end_us += 2_000_000
    # later requests of each lane shift by the slow first ones (keep lanes back to back)
    for lane in range(8):
        lane_recs = sorted((r for r in recs if r.user == lane), key=lambda r: r.seq)
        t = t0
        for r in lane_recs:
            r.t_start = t
            t += (r.end_us + 100) / 1e6
    return recs


def test_phases_by_count_and_time() -> None:
    recs = make_records(100)
    c = columns_from_records(recs)
    idx = rows(c)
    ph = phases(c, idx, Window.parse("10r"), Window.parse("5r"))
    starts = c.a["t_start"]
    assert (ph == WARMUP).sum() == 10 and (ph == COOLDOWN).sum() == 5 and (ph == MEASURED).sum() == 85
    assert starts[ph == WARMUP].max() <= starts[ph != WARMUP].min()  # the first 10 by start
    t0 = starts.min()
    ph = phases(c, idx, Window.parse("0.5s"), None)
    assert np.array_equal(ph == WARMUP, starts < t0 + 0.5)


def test_statistics_leave_windows_out() -> None:
    recs = _slow_start()
    meta = {"model_id": "m"}
    plain = build_result(recs, meta)
    assert plain["p99_ttft_ms"] > 1000  # the start-up burst decides p99 without a window
    res = build_result(recs, dict(meta, warmup="8r"))
    assert res["completed"] == 200 - 8 and res["p99_ttft_ms"] < 30
    w = res["windows"]
    assert w["warmup"]["requests"] == 8 and w["measured"]["requests"] == 192 and w["warmup"]["spec"] == "8r"
    # the measured window's duration is the throughput's denominator
    assert res["duration"] == pytest.approx(w["measured"]["end"] - w["measured"]["start"])
    assert res["request_throughput"] == pytest.approx(192 / res["duration"])
    both = build_result(recs, dict(meta, warmup="8r", cooldown="8r"))
    assert both["completed"] == 184 and both["windows"]["cooldown"]["requests"] == 8
    text = format_summary(both)
    assert (
        "Warm-up excluded (8r):" in text and "Cool-down excluded (8r):" in text and "Measured window:" in text
    )
    every = build_result(recs, dict(meta, warmup="1000r"))
    assert every["completed"] == 0 and any("nothing was measured" in x for x in every["warnings"])
    assert (
        "the warm-up and cool-down windows hold all 200 requests: nothing was measured" in every["warnings"]
    )


def test_no_record_is_not_said_to_be_the_windows_doing() -> None:
    # a run without a single record: the windows held nothing, so they are not why nothing was measured
    res = build_result([], {"date": "d", "warmup": "1s"})
    assert res["windows"]["warmup"]["requests"] == 0
    assert not any("windows hold" in x for x in res.get("warnings") or []), res.get("warnings")


def test_records_kept_and_report_shows_windows(tmp_path: str) -> None:
    run = write_run(os.path.join(tmp_path, "run"), _slow_start(), meta={"warmup": "8r"})
    with open(os.path.join(run, "records.jsonl")) as fh:
        assert sum(1 for _ in fh) == 200  # every request stays in the records
    data = load_run(run)
    assert data.result["windows"]["warmup"]["requests"] == 8 and data.result["completed"] == 192
    from orchestration.report.generate import generate

    assert generate([run], os.path.join(tmp_path, "rep"), ["html", "md"], quiet=True) == 0
    html = open(os.path.join(tmp_path, "rep", "report.html")).read()
    assert 'id="windows-table"' in html and "8 req (8r)" in html
    assert "warmup 8 req (8r)" in open(os.path.join(tmp_path, "rep", "report.md")).read()


def test_ttft_fluctuation_does_not_fire_on_startup(tmp_path: str) -> None:
    recs = _slow_start()
    data = load_run(write_run(os.path.join(tmp_path, "startup"), recs))
    found = {f.rule: f for f in dg.diagnose([data])}
    assert "ttft_fluctuation" not in found
    assert found["ttft_startup"].severity == "info" and "--warmup" in found["ttft_startup"].action
    # with the window, neither fires
    warm = load_run(write_run(os.path.join(tmp_path, "warm"), recs, meta={"warmup": "8r"}))
    assert not {"ttft_fluctuation", "ttft_startup"} & {f.rule for f in dg.diagnose([warm])}
    # a tail all through the run still is a fluctuation
    tail = load_run(write_run(os.path.join(tmp_path, "tail"), make_records(200, tail_every=20, tail_ms=3000)))
    assert "ttft_fluctuation" in {f.rule for f in dg.diagnose([tail])}
