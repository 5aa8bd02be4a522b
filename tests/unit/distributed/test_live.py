"""The web UI's live view: exact percentiles from the merged histograms, totals, rates, server tail."""

from __future__ import annotations

import json
import os
import time

import pytest

from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.views.live import LiveView, ServerTail, table_rows
from vllm_users.measure.histograms import HistogramSet
from vllm_users.measure.record import RequestRecord
from vllm_users.options import Options, build


def _batch(worker: str, scenario: str, ttfts_us: list[int], totals: dict) -> dict:
    h = HistogramSet()
    for k, t in enumerate(ttfts_us):
        h.add_record(
            RequestRecord(
                scenario=scenario,
                worker=worker,
                user=1,
                seq=k,
                endpoint="chat",
                t_start=0.0,
                chunk_times_us=[t, t + 1000],
                end_us=t + 1000,
                output_tokens=2,
            )
        )
    return {
        "worker": worker,
        "records": "",
        "n": 0,
        "hists": h.encode(),
        "final": False,
        "totals": totals,
        "health": {"cpu": [0.5, 0.7], "lag_ms": [1.0, 2.0]},
    }


def test_snapshot_merges_workers_and_scenarios(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = Collector(str(tmp_path))
    c.started = time.time() - 10
    tot = {"ok": 100, "failed": 2, "output_tokens": 200, "good": 90, "inflight": 3, "errors": {"http": 2}}
    c.on_batch(_batch("w0", "chat", list(range(1000, 101_000, 1000)), tot), "c0")
    c.on_batch(
        _batch("w1", "json", list(range(200_000, 300_000, 1000)), dict(tot, errors={"timeout": 1})), "c1"
    )
    opts = build(goodput="ttft:50")
    view = LiveView(c, opts, str(tmp_path), [])
    snap = view.update("running")
    assert snap["totals"]["ok"] == 200 and snap["totals"]["inflight"] == 6
    assert snap["errors"] == {"http": 2, "timeout": 1}
    assert snap["rates"]["req_s"] == pytest.approx(20.0, rel=0.05)
    lat = snap["latency"]
    assert lat["chat"]["ttft"]["p50"] == pytest.approx(50.0, rel=0.002)  # exact to 3 significant digits
    assert lat["json"]["ttft"]["p50"] == pytest.approx(249.0, rel=0.002)
    assert lat["all"]["ttft"]["count"] == 200 and lat["all"]["ttft"]["p50"] == pytest.approx(100.0, rel=0.002)
    assert snap["goodput"]["good"] == 180 and snap["goodput"]["good_fraction"] == pytest.approx(180 / 204)
    assert [w["cpu"] for w in snap["workers"]] == [0.6, 0.6]
    assert snap["series"]["ttft_p50_ms"][-1] is not None and snap["arrivals"] is None
    rows = table_rows(lat)
    assert [r["name"] for r in rows] == ["chat", "json", "all"] and rows[2]["requests"] == 200
    assert view.update("running")["series"]["ttft_p50_ms"][-1] is None  # nothing new in the window
    c.close()


def test_server_tail_reads_appended_samples(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "server_metrics.jsonl"
    tail = ServerTail(str(path))
    assert tail.poll() is None
    rows = [
        {
            "t": time.time(),
            "v": {
                "vllm:num_requests_running": 4.0,
                "vllm:prefix_cache_hits_total": 10.0,
                "vllm:prefix_cache_queries_total": 100.0,
            },
        },
        {"t": time.time(), "error": "HTTP 500"},
        {
            "t": time.time(),
            "v": {
                "vllm:num_requests_running": 6.0,
                "vllm:num_requests_waiting": 2.0,
                "vllm:kv_cache_usage_perc": 0.25,
                "vllm:prefix_cache_hits_total": 60.0,
                "vllm:prefix_cache_queries_total": 200.0,
            },
        },
    ]
    path.write_text(
        "\n".join(json.dumps(r) for r in rows) + '\n{"t": 1, "v": {"vllm:num_req'
    )  # torn last line
    s = tail.poll()
    assert s is not None
    assert (s["running"], s["waiting"], s["kv_cache_usage"]) == (6.0, 2.0, 0.25)
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.5)  # (60-10)/(200-100) since the first sample


def test_ttfa_rows_only_for_reasoning_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The LLM tab's TTFA table: the answers' percentiles beside TTFT, absent without reasoning."""
    c = Collector(str(tmp_path))
    c.started = time.time() - 10
    h = HistogramSet()
    for k in range(100):  # first (reasoning) chunk at 10 ms, the first answer chunk at 20-119 ms
        h.add_record(
            RequestRecord(
                scenario="chat",
                worker="w0",
                user=1,
                seq=k,
                endpoint="chat",
                t_start=0.0,
                chunk_times_us=[10_000, 20_000 + 1000 * k, 200_000],
                end_us=200_000,
                output_tokens=3,
                answer_us=20_000 + 1000 * k,
                reasoning_tokens=1,
            )
        )
    tot = {"ok": 100, "failed": 0, "output_tokens": 300, "inflight": 0}
    c.on_batch(
        {
            "worker": "w0",
            "records": "",
            "n": 0,
            "hists": h.encode(),
            "final": False,
            "totals": tot,
            "health": {"cpu": [0.1], "lag_ms": [1.0]},
        },
        "c0",
    )
    c.on_batch(_batch("w1", "json", [5000] * 10, tot), "c1")
    snap = LiveView(c, Options(), str(tmp_path), []).update("running")
    rows = {r["name"]: r for r in snap["ttfa"]}
    assert set(rows) == {"chat", "all"}  # json streamed no reasoning: no row of its own
    assert rows["chat"]["answers"] == 100 and rows["chat"]["ttft_p50"] == pytest.approx(10.0, rel=0.002)
    assert rows["chat"]["ttfa_p50"] == pytest.approx(69.0, rel=0.02) and rows["chat"]["ttfa_p99"] > 110
    c.close()
    plain = Collector(str(tmp_path / "plain"))
    plain.started = time.time() - 10
    plain.on_batch(_batch("w0", "chat", [5000] * 10, tot), "c0")
    assert LiveView(plain, Options(), str(tmp_path), []).update("running")["ttfa"] is None
    plain.close()


def test_the_final_rates_are_result_json_s(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Once the run has ended the tab's rates are result.json's (its benchmark duration, its measured window), not
    the live totals over the elapsed time: a run of 1.6 s of requests, 10 s after the master started."""
    from tests.unit.measure.helpers import rec
    from vllm_users.measure.metrics import Slo
    from vllm_users.measure.result_builder import build_run_result

    recs = [rec(100.0 + 0.1 * i, [20.0, 30.0, 40.0], out=3) for i in range(16)]  # 16 requests, ~1.54 s
    res = build_run_result(recs, {"date": "d", "warmup": "4r"}, slo=Slo.parse(["ttft:100"]))
    assert res.completed == 12 and res.metric("duration") < 2 and res.metric("request_goodput") is not None
    c = Collector(str(tmp_path))
    c.started = time.time() - 10  # the elapsed time: ~10 s, not the benchmark's duration
    tot = {"ok": 16, "failed": 0, "output_tokens": 48, "good": 16, "inflight": 0, "errors": {}}
    c.on_batch(_batch("w0", "chat", [20_000] * 16, tot), "c0")
    view = LiveView(c, build(goodput="ttft:100"), str(tmp_path), [])
    running = view.update("running")
    assert running["rates_over"] == "interval" and running["final"] is None
    snap = view.update("stopped", finished=True, result=res)
    assert snap["rates_over"] == "result"
    assert snap["rates"]["req_s"] == res.metric("request_throughput")
    assert snap["rates"]["output_tok_s"] == res.metric("output_throughput")
    assert snap["rates"]["failed_s"] == 0.0
    assert snap["rates"]["sent_s"] == pytest.approx(12 / res.metric("duration"))
    fin = snap["final"]
    assert fin["completed"] == 12 and fin["left_out"] == 4 and fin["output_tokens"] == 36
    assert fin["duration_s"] == res.metric("duration")
    assert snap["goodput"]["good_req_s"] == res.metric("request_goodput")
    # the elapsed-time mean it used to show: 16 / ~10 s, a different number
    assert abs(snap["rates"]["req_s"] - 16 / 10) > 1
    c.close()


def test_a_finished_run_without_a_result_shows_no_rates(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = Collector(str(tmp_path))
    c.started = time.time() - 10
    tot = {"ok": 5, "failed": 0, "output_tokens": 10, "inflight": 0, "errors": {}}
    c.on_batch(_batch("w0", "chat", [20_000] * 5, tot), "c0")
    snap = LiveView(c, Options(), str(tmp_path), []).update("stopped", finished=True)
    assert snap["final"] is None and set(snap["rates"].values()) == {None}  # absent, never a made-up mean


def test_workers_show_the_summarys_verdict(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The LLM tab's workers table: each worker's verdict in the console summary's words. A worker whose loop lag
    was the machine's (the recorded busy-machine case) is not shown client-bound."""
    from orchestration.report.summary import client_lines
    from vllm_users.distributed.views.live import workers
    from vllm_users.measure.health import summarize

    cases = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "data", "health_cases.json")))
    c = Collector(str(tmp_path))
    for name in ("machine_busy", "loop_blocked_busy", "too_short"):
        c.on_batch(dict(_batch(name, "chat", [1000], {}), health=cases["cases"][name]["samples"]), name)
    rows = {w["name"]: w for w in workers(c, time.time())}
    assert {n: (w["verdict"], w["client_bound"]) for n, w in rows.items()} == {
        "machine_busy": ("machine_busy", False),
        "loop_blocked_busy": ("loop_blocked", True),
        "too_short": ("too_short", None),
    }
    summary = summarize(c.health)
    for name, w in rows.items():  # the same words as the summary's line for that worker alone
        alone = {"verdict": summary["workers"][name]["verdict"], "workers": {name: summary["workers"][name]}}
        assert w["verdict_text"] in client_lines(alone)[0], (w, client_lines(alone))
    assert rows["machine_busy"]["verdict_text"].startswith("MACHINE BUSY")
    assert rows["too_short"]["verdict_text"] == "too short to judge"
    c.close()
