"""--records-at-end: per-second batches carry histograms and counters only; the records come at the drain."""

from __future__ import annotations

import json
from typing import Any

from vllm_users.distributed.transport import worker_side
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.transport.messages import Batch, ToMaster
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.measure.record import RequestRecord
from vllm_users.options import build


def _opts(tmp: str, at_end: bool) -> Any:
    return build(results_dir=tmp, records_at_end=at_end)


def _rec(i: int) -> RequestRecord:
    c = [1000 + 500 * k for k in range(8)]
    return RequestRecord(
        "chat", "w", 0, i, "chat", 1.7e9 + i, chunk_times_us=c, end_us=c[-1], output_tokens=8
    )


def test_records_stay_local_until_the_drain(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(worker_side, "END_CHUNK_RECORDS", 7)  # several chunks
    col = Collector(str(tmp_path / "run"))
    sent: list[Batch] = []

    def send(msg: ToMaster) -> None:
        if isinstance(msg, Batch):
            sent.append(msg)
            col.on_batch(msg, "c1")

    ctx = WorkerContext(_opts(str(tmp_path / "w"), True), 0, 1, send)
    for i in range(20):
        ctx.submit(_rec(i))
    live = ctx.take_batch()
    assert live.n == 0 and live.records == "" and live.cols is None
    assert (
        live.hists and live.totals and live.totals["ok"] == 20
    )  # histograms and counters still flow every second
    send(live)
    for i in range(20, 25):
        ctx.submit(_rec(i))
    ctx.drain(0)
    assert [b.n for b in sent] == [0, 7, 7, 7, 4, 0] and sent[-1].final
    col.close()
    lines = (tmp_path / "run" / "records.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["seq"] for x in lines) == list(range(25))
    assert col.workers[ctx.name].records == 25 and col.workers[ctx.name].final


def test_default_mode_streams_records_every_batch(tmp_path: Any) -> None:
    ctx = WorkerContext(_opts(str(tmp_path / "w"), False), 0, 1, lambda m: None)
    for i in range(3):
        ctx.submit(_rec(i))
    b = ctx.take_batch()
    assert b.n == 3 and b.cols is not None
