"""The master's view of workers: a silent worker is reported lost, and taken back when it speaks again."""

from __future__ import annotations

from vllm_users.distributed.transport.master_side import Collector


def _batch(worker: str, final: bool = False) -> dict:
    return {"worker": worker, "records": "", "n": 0, "hists": {}, "health": {}, "final": final, "totals": {}}


def test_stalled_worker_is_lost_then_recovered(tmp_path) -> None:
    c = Collector(str(tmp_path))
    c.on_batch(_batch("w0"), client_id="c0")
    c.on_batch(_batch("w1"), client_id="c1")
    assert c.mark_lost("c0", now=c.workers["w0"].last_batch + 5) is not None
    assert [w.name for w in c.live()] == ["w1"]
    c.on_batch(_batch("w0"), client_id="c0")  # it was only stalled
    assert c.workers["w0"].lost_at is None and len(c.workers["w0"].stalls_s) == 1
    c.on_batch(_batch("w0", final=True), client_id="c0")
    c.on_batch(_batch("w1", final=True), client_id="c1")
    report = c.loss_report()
    assert report["complete"] and report["workers_lost"] == []
    assert list(report["worker_stalls_s"]) == ["w0"]
    c.close()


def test_worker_that_never_returns_stays_lost(tmp_path) -> None:
    c = Collector(str(tmp_path))
    c.on_batch(_batch("w0"), client_id="c0")
    c.mark_lost("c0", now=c.workers["w0"].last_batch + 4)
    report = c.loss_report()
    assert not report["complete"] and report["workers_lost"][0]["worker"] == "w0"
    assert 0 <= report["workers_lost"][0]["possible_loss_window_s"] <= 2.0
    c.close()


def test_no_worker_left_says_lost_or_ended(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A stop (--run-time, a burst's end) leaves no live worker because each sent its final batch: "ended", a normal
    end the master logs no error for; a worker gone without its final batch: "lost"."""
    c = Collector(str(tmp_path))
    assert c.none_left(10.0, 0.0) is None  # before any worker
    c.on_batch(_batch("w0"), client_id="c0")
    c.on_batch(_batch("w1"), client_id="c1")
    t = c.workers["w1"].last_batch
    assert c.none_left(10.0, t + 1) is None  # both live
    c.on_batch(_batch("w0", final=True), client_id="c0")
    c.on_batch(_batch("w1", final=True), client_id="c1")
    assert c.none_left(10.0, t + 1) == "ended"
    lost = Collector(str(tmp_path / "lost"))
    lost.on_batch(_batch("w0", final=True), client_id="c0")
    lost.on_batch(_batch("w1"), client_id="c1")
    t = lost.workers["w1"].last_batch
    lost.mark_lost("c1", now=t + 5)
    assert lost.none_left(10.0, t + 5) is None  # silent for less than the bound
    assert lost.none_left(10.0, t + 11) == "lost"
    c.close()
    lost.close()
