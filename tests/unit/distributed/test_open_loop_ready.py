"""The open-loop schedule's clock starts once every user is set up: a worker reports ready only
after spawning completed and each of its users waits for a ticket; arrivals are due from the agreed t0."""

from __future__ import annotations

import time
from typing import Any

import gevent

from vllm_users.distributed.transport import open_loop
from vllm_users.distributed.transport.messages import Ready, ToMaster
from vllm_users.distributed.transport.open_loop import OpenLoopSchedule
from vllm_users.options import build


def _schedule(users: int, sent: list[ToMaster], started: list[float]) -> OpenLoopSchedule:
    o = build(request_rate=200.0, num_prompts=6, burstiness=float("inf"))
    return OpenLoopSchedule(o, 0, 1, "w0", sent.append, lambda: users, started.append)


def test_ready_once_spawned_and_every_user_waits_then_arrivals_from_t0() -> None:
    sent: list[ToMaster] = []
    started: list[float] = []
    s = _schedule(3, sent, started)
    s.start()
    got: list[Any] = []
    users = [gevent.spawn(lambda: got.append((s.take(), time.time()))) for _ in range(2)]
    gevent.sleep(0.1)
    assert sent == []  # two of three users, and spawning not complete
    s.on_spawned()
    gevent.sleep(0.1)
    assert sent == []  # the third user is still in its setup
    users.append(gevent.spawn(lambda: got.append((s.take(), time.time()))))
    gevent.sleep(0.1)
    assert sent == [Ready("w0", 3)]
    assert got == []  # no arrival before the master's t0
    t0 = time.time() + 0.05
    s.on_t0(t0)
    gevent.joinall(users, timeout=2)
    assert started == [t0] and len(got) == 3
    assert [t.index for t, _ in got] == [0, 1, 2]
    assert all(t.t_intended > t0 and taken >= t.t_intended - 0.002 for t, taken in got)  # each when it is due
    s.stop()


def test_stuck_users_do_not_hold_the_schedule_forever(monkeypatch: Any) -> None:
    monkeypatch.setattr(open_loop, "USERS_READY_WAIT_S", 0.05)
    sent: list[ToMaster] = []
    s = _schedule(4, sent, [])
    s.start()
    s.on_spawned()  # no user ever asks for a ticket (one crashed in on_start, say)
    gevent.sleep(0.2)
    assert sent == [Ready("w0", 0)]
    s.stop()


def test_the_worker_starts_alone_when_no_t0_comes(monkeypatch: Any) -> None:
    monkeypatch.setattr(open_loop, "T0_WAIT_S", 0.05)
    started: list[float] = []
    s = _schedule(1, [], started)
    s.start()
    s.on_spawned()
    g = gevent.spawn(s.take)
    g.join(timeout=2)
    assert g.value is not None and len(started) == 1
    s.stop()
