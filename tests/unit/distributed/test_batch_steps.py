"""The per-second batch is built in steps with the loop free between them, and loses nothing."""

from __future__ import annotations

from typing import Any

import gevent
import gevent.event

from vllm_users.distributed.transport import worker_side
from vllm_users.distributed.transport.messages import Batch
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.measure.record import RequestRecord
from vllm_users.options import Options


def _rec(i: int) -> RequestRecord:
    c = [50_000 + 10_000 * k for k in range(16)]
    return RequestRecord(
        "chat", "w", 0, i, "chat", 1.7e9 + i, chunk_times_us=c, end_us=c[-1], output_tokens=16
    )


def _ctx(monkeypatch: Any, send: Any) -> WorkerContext:
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    return WorkerContext(Options(), 0, 1, send)


def test_take_batch_pauses_between_steps_and_keeps_what_comes_meanwhile(monkeypatch: Any) -> None:
    ctx = _ctx(monkeypatch, lambda m: None)
    for i in range(200):
        ctx.submit(_rec(i))
    pauses: list[int] = []

    def pause() -> None:  # what the loop runs between two steps: more requests finish
        pauses.append(len(pauses))
        ctx.submit(_rec(1000 + len(pauses)))

    first = ctx.take_batch(pause=pause)
    assert len(pauses) >= 3  # packing, the histograms, the JSON lines: each a step of its own
    assert first.n == 200 and first.records.count("\n") == 199 and first.totals and first.totals["ok"] == 200
    second = ctx.take_batch()
    assert second.n == len(pauses) and second.totals and second.totals["ok"] == 200 + len(pauses)
    assert second.hists and second.hists.keys() == first.hists.keys()


def test_the_final_batch_comes_after_one_being_built(monkeypatch: Any) -> None:
    sent: list[bool] = []
    ctx = _ctx(monkeypatch, lambda m: sent.append(m.final) if isinstance(m, Batch) else None)
    release = gevent.event.Event()
    monkeypatch.setattr(worker_side, "BATCH_INTERVAL_S", 0.01)
    monkeypatch.setattr(worker_side, "_yield", lambda: release.wait())  # the report loop stuck mid-batch
    ctx.submit(_rec(0))
    ctx.start()
    gevent.sleep(0.05)  # the report loop is inside take_batch now
    drain = gevent.spawn(ctx.drain, 0)
    gevent.sleep(0.05)
    assert sent == []  # the drain waits for the batch in progress
    release.set()
    drain.join(timeout=5)
    assert sent == [False, True]
