"""The LLM tab's per-class rows: records of two classes through the live path (worker counts and
histograms -> batch -> master -> snapshot) give the numbers per_class.py computes from the same records."""

from __future__ import annotations

import random
import time
from dataclasses import asdict

import numpy as np
import pytest

from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.distributed.views.live import LiveView
from vllm_users.measure.metrics import Slo, tpot_s
from vllm_users.measure.per_class import per_class
from vllm_users.measure.record import RequestRecord
from vllm_users.options import Options, build
from vllm_users.workload.classes import parse_classes

CLASSES = ("chat:weight=3,ttft=150,tpot=20", "batch:weight=1,e2el=2000")


def _records(n: int, seed: int = 7) -> list[RequestRecord]:
    """Two classes with different latencies, some failures and interruptions, a few trace tenants' requests."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        cls = "chat" if k % 4 else ("batch" if k % 8 else "tenant-x")  # tenant-x: a class not in the table
        slow = 3.0 if cls == "batch" else 1.0
        ttft = int(rng.uniform(20_000, 300_000) * slow)
        toks = rng.randint(1, 40)
        chunks = [ttft + int(i * rng.uniform(5_000, 30_000) * slow) for i in range(toks)]
        error = None if k % 13 else ("http" if k % 26 else "interrupted")
        out.append(
            RequestRecord(
                scenario="chat",
                worker="w",
                user=1,
                seq=k,
                endpoint="chat",
                t_start=1000.0 + k * 0.01,
                chunk_times_us=[] if error == "http" else chunks,
                end_us=chunks[-1] + 500,
                output_tokens=None if error else toks,
                error=error,
                request_class=cls,
            )
        )
    return out


def _live(tmp_path, recs: list[RequestRecord], opts: Options) -> dict:  # type: ignore[no-untyped-def]
    """Two workers split the records; each sends two batches (so merging across batches and workers counts)."""
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
    snap = view.update("running")
    c.close()
    return snap


def _between_neighbours(live: float, values: np.ndarray, p: float) -> None:
    """HdrHistogram's pN (3 significant digits) lies within the order statistics around numpy's pN."""
    v = np.sort(values)
    rank = p / 100 * (v.size - 1)
    lo, hi = v[max(int(np.floor(rank)) - 1, 0)], v[min(int(np.ceil(rank)) + 1, v.size - 1)]
    assert lo * 0.999 <= live <= hi * 1.001, (live, lo, hi)


def test_per_class_live_rows_match_per_class_py(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    opts = build(vllm_classes=parse_classes(CLASSES), goodput="ttft:200")
    recs = _records(800)
    snap = _live(tmp_path, recs, opts)
    live = snap["classes"]
    want = per_class(
        recs, None, [asdict(c) for c in opts.classes.vllm_classes], slo=Slo.parse([opts.measure.goodput])
    )  # run_end's table
    assert want is not None
    assert (
        live["order"] == list(live["per_class"]) == list(want["per_class"]) == ["chat", "batch", "tenant-x"]
    )
    for name, w in want["per_class"].items():
        got = live["per_class"][name]
        for k in ("requests", "completed", "failed", "good", "weight", "slo_ms"):
            assert got[k] == w[k], (name, k)
        for k in ("weight_share", "output_token_share", "good_fraction"):
            assert got[k] == pytest.approx(w[k]), (name, k)
        assert got["output_tokens"] == round(w["output_throughput"] * want["duration"])
        assert got["request_goodput"] == pytest.approx(
            w["good"] / snap["elapsed_s"], rel=0.05
        )  # good / run so far
        mine = [r for r in recs if r.request_class == name and r.error is None and r.chunk_times_us]
        series = {
            "ttft": [r.chunk_times_us[0] / 1e3 for r in mine],
            "e2el": [r.chunk_times_us[-1] / 1e3 for r in mine],
            "tpot": [t * 1e3 for r in mine if (t := tpot_s(r)) is not None],
        }
        for m, values in series.items():
            for p in (50, 99):
                key = f"p{p}_{m}_ms"
                _between_neighbours(w[key], np.asarray(values), p)  # numpy's, interpolated
                _between_neighbours(got[key], np.asarray(values), p)  # the live one, as exact as HDR allows
    # the classes' own SLOs: chat's ttft=150/tpot=20 and batch's e2el=2000 replace the run's ttft:200; tenant-x
    # has none of its own and takes the run's
    assert live["per_class"]["chat"]["slo_ms"] == {"ttft": 150.0, "tpot": 20.0}
    assert live["per_class"]["tenant-x"]["slo_ms"] == {"ttft": 200.0}
    assert 0 < live["per_class"]["chat"]["good"] < live["per_class"]["chat"]["completed"]
    assert live["fairness"]["jain_index"] == pytest.approx(want["fairness"]["jain_index"], rel=1e-9)
    assert live["fairness"]["of"] == want["fairness"]["of"]


def test_no_classes_no_rows_and_no_cost(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Without classes the snapshot has no class table and batches carry nothing extra."""
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    opts = Options()
    recs = [
        RequestRecord(
            scenario="chat",
            worker="w",
            user=1,
            seq=k,
            endpoint="chat",
            t_start=0.0,
            chunk_times_us=[1000, 2000],
            end_us=2000,
            output_tokens=2,
        )
        for k in range(10)
    ]
    ctx = WorkerContext(opts, 0, 1, lambda m: None)
    for r in recs:
        ctx.submit(r)
    batch = ctx.take_batch()
    assert batch.class_hists is None and batch.totals is not None and "classes" not in batch.totals
    assert _live(tmp_path, recs, opts)["classes"] is None


def test_class_tok_s_is_per_window_then_over_the_run(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    opts = build(vllm_classes=parse_classes(("a:weight=1", "b:weight=1")))
    c = Collector(str(tmp_path / "run"))
    c.started = time.time() - 100
    view = LiveView(c, opts, str(tmp_path), [])
    ctx = WorkerContext(opts, 0, 1, lambda m: None)

    def send(cls: str, n: int) -> None:
        for k in range(n):
            ctx.submit(
                RequestRecord(
                    scenario="chat",
                    worker="w",
                    user=1,
                    seq=k,
                    endpoint="chat",
                    t_start=0.0,
                    chunk_times_us=[1000, 2000],
                    end_us=2000,
                    output_tokens=10,
                    request_class=cls,
                )
            )
        c.on_batch(ctx.take_batch(), "c0")

    send("a", 50)
    view.update("running")
    view._prev = (time.time() - 2.0, *view._prev[1:])  # type: ignore[index]  # the last snapshot was 2 s ago
    send("b", 20)
    snap = view.update("running")
    rows = snap["classes"]["per_class"]
    assert rows["a"]["output_throughput"] == 0.0  # nothing new for a in this window
    assert rows["b"]["output_throughput"] == pytest.approx(100.0, rel=0.05)  # 200 tokens in ~2 s
    assert rows["b"]["completed"] == 20 and "p50_ttft_ms" in rows["b"]
    final = view.update("stopped", finished=True)["classes"]["per_class"]
    assert final["a"]["output_throughput"] == pytest.approx(5.0, rel=0.05)  # 500 tokens over ~100 s
    assert snap["classes"]["fairness"]["jain_index"] == pytest.approx((50 + 20) ** 2 / (2 * (50**2 + 20**2)))
    c.close()
