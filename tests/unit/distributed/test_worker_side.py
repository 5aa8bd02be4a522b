"""The worker's ticket budget: a late second "budget used up" answer must not keep the worker from finishing."""

from __future__ import annotations

from gevent.queue import Queue

from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.options import build


def test_two_budget_ends_leave_one_end_marker(monkeypatch) -> None:
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    o = build(num_prompts=4)
    ctx = WorkerContext(o, 0, 1, lambda m: None)
    ctx._grants = Queue()
    ctx.on_grant(0, 4)
    assert [ctx.next_ticket().index for _ in range(4)] == [0, 1, 2, 3]  # type: ignore[union-attr]
    ctx.on_grant(4, 0)
    ctx.on_grant(4, 0)  # the answer to a re-ask sent while the first was slow (a loaded master)
    assert ctx.next_ticket() is None and ctx.next_ticket() is None
    assert ctx._share_finished()  # so the worker reports done and the run ends


def test_a_session_between_requests_keeps_the_worker_busy(monkeypatch) -> None:
    """An agent thinking between two requests has nothing in flight, but its session is not over."""
    monkeypatch.delenv("VLLM_LOCUST_WORKER_DIR", raising=False)
    ctx = WorkerContext(build(num_prompts=1), 0, 1, lambda m: None)
    ctx._grants = Queue()
    ctx.on_grant(0, 1)
    ctx.next_ticket()
    ctx.on_grant(1, 0)
    ctx.open_sessions = 1
    assert not ctx.inflight and not ctx._share_finished()
    ctx.open_sessions = 0
    assert ctx._share_finished()
