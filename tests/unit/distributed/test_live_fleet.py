"""The LLM tab's per-endpoint and per-replica rows: records of a fleet through the live path (worker counts and
histograms -> batch -> master -> snapshot) give result.json's counts, and its latencies within HdrHistogram's
precision; one endpoint gives no rows and costs the batches nothing; the ended run shows result.json's figures."""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import pytest

from tests.unit.measure.helpers import rec
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.distributed.views.live import LiveView
from vllm_users.measure.metrics import tpot_s
from vllm_users.measure.record import RequestRecord
from vllm_users.measure.result_builder import build_run_result
from vllm_users.options import Options

T0 = 1_700_000_000.0
E1, E2 = "10.0.0.1:8000", "10.0.0.2:8000"


def _fleet(n: int, seed: int = 3) -> list[RequestRecord]:
    """E1 fast (TTFT ~20-60 ms), E2 slow (~200-600 ms) and failing one request in 7; replicas r0/r1 behind each."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        host = (E1, E2)[k % 2]
        slow = 10.0 if host == E2 else 1.0
        ttft = rng.uniform(20, 60) * slow
        toks = rng.randint(2, 30)
        chunks = [ttft + i * rng.uniform(5, 15) * slow for i in range(toks)]
        if host == E2 and k % 7 == 1:
            out.append(
                rec(T0 + k * 0.01, [], None, host=host, error="http", status=500, replica=f"r{k % 3 % 2}")
            )
        else:
            out.append(rec(T0 + k * 0.01, chunks, toks, host=host, replica=f"r{k % 3 % 2}"))
    return out


def _view(tmp_path, recs: list[RequestRecord]) -> tuple[Collector, LiveView, dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Two workers split the records; each sends two batches (so merging across batches and workers counts)."""
    opts = Options()
    c = Collector(str(tmp_path / "run"))
    c.started = time.time() - 10
    view = LiveView(c, opts, str(tmp_path), [])
    workers = [WorkerContext(opts, i, 2, lambda m: None) for i in range(2)]
    half = len(recs) // 2
    for part in (recs[:half], recs[half:]):
        for k, r in enumerate(part):
            workers[k % 2].submit(r)
        for i, w in enumerate(workers):
            c.on_batch(w.take_batch(), f"c{i}")
    return c, view, view.update("running")


def _between_neighbours(live: float, values: np.ndarray, p: float) -> None:
    """HdrHistogram's pN (3 significant digits) lies within the order statistics around numpy's pN."""
    v = np.sort(values)
    rank = p / 100 * (v.size - 1)
    lo, hi = v[max(int(np.floor(rank)) - 1, 0)], v[min(int(np.ceil(rank)) + 1, v.size - 1)]
    assert lo * 0.999 <= live <= hi * 1.001, (live, lo, hi)


def test_two_endpoints_two_rows_with_result_json_s_counts(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    recs = _fleet(400)
    res = build_run_result(recs, {"date": "d", "endpoints": [E1, E2]})
    assert res.per_endpoint is not None and res.per_replica is not None
    per_ep, per_rep = res.per_endpoint, res.per_replica
    c, view, snap = _view(tmp_path, recs)
    ends = snap["endpoints"]
    assert ends["order"] == [E1, E2] and ends["over"] == "interval"
    want = per_ep["groups"]
    for name, row in ends["groups"].items():
        assert row["requests"] == want[name]["requests"] == 200
        assert (row["completed"], row["failed"]) == (want[name]["completed"], want[name]["failed"])
        mine = [r for r in recs if r.host == name and r.error is None]
        assert row["output_tokens"] == sum(r.output_tokens or 0 for r in mine)
        ttft = np.array([r.chunk_times_us[0] / 1e3 for r in mine])
        tpot = np.array([t * 1e3 for r in mine if (t := tpot_s(r)) is not None])
        _between_neighbours(row["p50_ttft_ms"], ttft, 50)
        _between_neighbours(row["p99_ttft_ms"], ttft, 99)
        _between_neighbours(row["p50_tpot_ms"], tpot, 50)
    assert ends["groups"][E2]["failed"] > 0 == ends["groups"][E1]["failed"]
    assert (
        ends["groups"][E2]["p99_ttft_ms"] > 5 * ends["groups"][E1]["p99_ttft_ms"]
    )  # the slow one reads slow
    # replicas behind several endpoints are named as per_replica names them: ENDPOINT REPLICA
    reps = snap["replicas"]
    assert set(reps["groups"]) == set(per_rep["groups"]) == {f"{e} r{i}" for e in (E1, E2) for i in (0, 1)}
    for name, row in reps["groups"].items():
        assert row["completed"] == per_rep["groups"][name]["completed"]
    # the last interval's tok/s: nothing came since, so the next snapshot says 0
    assert ends["groups"][E1]["output_throughput"] > 0
    assert view.update("running")["endpoints"]["groups"][E1]["output_throughput"] == 0
    # the ended run shows result.json's rows
    fin = view.update("stopped", finished=True, result=res)
    assert fin["endpoints"]["over"] == "result"
    assert fin["endpoints"]["groups"] == dict(per_ep["groups"])
    assert fin["replicas"]["groups"] == dict(per_rep["groups"])
    c.close()


def test_one_endpoint_no_rows_and_no_cost(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One URL (records without host) and one replica: no table, and batches carry nothing extra."""
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    recs = [rec(T0 + k, [10, 20], 2) for k in range(10)]
    ctx = WorkerContext(Options(), 0, 1, lambda m: None)
    for r in recs:
        ctx.submit(r)
    batch = ctx.take_batch()
    assert batch.group_hists is None and batch.totals is not None
    assert "endpoints" not in batch.totals and "replicas" not in batch.totals
    assert "group_hists" not in batch.to_payload()
    c, _view_, snap = _view(tmp_path, recs)
    assert snap["endpoints"] is None and snap["replicas"] is None
    c.close()
    one = [rec(T0 + k, [10, 20], 2, replica="r0") for k in range(10)]  # one replica named: still no table
    c, _view_, snap = _view(tmp_path / "one", one)
    assert snap["replicas"] is None
    c.close()


def test_an_old_batch_without_group_hists_is_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A payload from before per-endpoint rows (no group_hists) still goes in."""
    c = Collector(str(tmp_path / "run"))
    c.on_batch({"worker": "w0", "n": 0, "records": "", "hists": {}, "totals": {"ok": 1}}, "c0")
    assert c.group_hists == {} and c.workers["w0"].totals == {"ok": 1}
    c.close()


@pytest.mark.parametrize("failed", [True, False])
def test_a_replica_without_successes_has_no_latency(tmp_path, monkeypatch, failed: bool) -> None:  # type: ignore[no-untyped-def]
    """A replica that only failed has counts and no latency figures (absent, never 0)."""
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    recs = [rec(T0 + k, [10, 20], 2, replica="good") for k in range(6)]
    recs += [
        rec(T0 + 6 + k, [], None, replica="bad", error="http", status=503) for k in range(3 if failed else 0)
    ]
    recs += [rec(T0 + 9, [10, 20], 2, replica="other")] if not failed else []
    c, _view_, snap = _view(tmp_path, recs)
    rows = snap["replicas"]["groups"]
    if failed:
        assert rows["bad"]["failed"] == 3 and rows["bad"]["completed"] == 0
        assert not any(k.endswith("_ms") for k in rows["bad"])
    assert rows["good"]["completed"] == 6 and rows["good"]["p50_ttft_ms"] == pytest.approx(10.0, rel=0.001)
    c.close()


def test_live_rows_histograms_without_itl_equal_the_full_ones() -> None:
    """The groupings' histograms skip ITLs (their cost: a record's ~63 gaps); TTFT, TPOT and E2EL stay the same."""
    from vllm_users.measure.histograms import HistogramSet

    recs = _fleet(300)
    recs.append(rec(T0, [5, 7], 1, not_streamed=True))  # one non-streamed answer: an E2EL only
    full, lean = HistogramSet(), HistogramSet()
    for r in recs:
        full.add_record(r, "g")
        lean.add_record(r, "g", itl=False)
    assert ("g", "itl") in full.hists and ("g", "itl") not in lean.hists
    for m in ("ttft", "tpot", "e2el"):
        a, b = full.hists["g", m], lean.hists["g", m]
        assert a.get_total_count() == b.get_total_count() > 0
        assert [a.get_value_at_percentile(p) for p in (1, 50, 99, 100)] == [
            b.get_value_at_percentile(p) for p in (1, 50, 99, 100)
        ]
