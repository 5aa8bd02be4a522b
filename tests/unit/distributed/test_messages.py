"""The worker<->master protocol (vllm_users.distributed.transport.messages): every payload survives Locust's wire, the
bytes on the wire are those the previous protocol code sent (a master and workers of neighbouring versions talk),
an unknown kind is refused by name, and the one send-or-call-locally path reaches both kinds of runner."""

from __future__ import annotations

import time
from typing import Any

import pytest
from locust.rpc import Message

from vllm_users.distributed.transport import messages as M
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.measure.record import RequestRecord
from vllm_users.options import Options

SAMPLES: list[Any] = [
    M.Batch(
        worker="h-w0",
        n=2,
        records='{"a":1}\n{"a":2}',
        hists={"chat|ttft": "eJw="},
        health={"cpu": [0.5], "lag_ms": [1.0]},
        final=True,
        cols=b"\x00\x01",
        calibration={"k": 1.5},
        total=7,
        totals={"ok": 2, "errors": {}},
        class_hists={"gold|ttft": "eJx="},
        sent_at=1.7e9,
    ),
    M.Batch(
        worker="h-w1", n=0, records="", hists={}, health={}, total=0, totals={"ok": 0}, sent_at=1.7e9 + 1
    ),
    M.Need("h-w0", 4),
    M.First("h-w0", 1.7e9 + 0.25),
    M.Ready("h-w0", 12),
    M.Done("h-w0"),
    M.Stop(30.0),
    M.Grant(40, 8),
    M.Rate([[0.0, 10.0], [12.5, 20.0]]),
    M.T0(1.7e9 + 0.2),
    M.ClockPing("h-w0", 3),
    M.ClockReport("h-w0", -2.5, 0.0004, 0.0008, 8),
    M.ClockPong(3, 1.7e9 + 0.125),
]


def _wire(kind: str, payload: Any) -> Message:
    """`payload` after Locust's serialisation and back, as the other process receives it."""
    return Message.unserialize(Message(kind, payload, "node-1").serialize())


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_payload_round_trips_through_locusts_wire(msg: Any) -> None:
    got = _wire(msg.KIND, msg.to_payload())
    table = M.TO_MASTER if msg.KIND in M.TO_MASTER else M.TO_WORKER
    assert M.decode(table, got.type, got.data) == msg


def test_every_kind_is_in_exactly_one_table_under_its_wire_name() -> None:
    kinds = {type(m).KIND for m in SAMPLES}
    assert kinds == set(M.TO_MASTER) | set(M.TO_WORKER) and not set(M.TO_MASTER) & set(M.TO_WORKER)
    assert kinds == {
        "vllm_batch",
        "vllm_need",
        "vllm_first",
        "vllm_ready",
        "vllm_done",
        "vllm_stop",
        "vllm_grant",
        "vllm_rate",
        "vllm_t0",
        "vllm_clock_ping",
        "vllm_clock",
        "vllm_clock_pong",
    }
    assert [k for k, c in {**M.TO_MASTER, **M.TO_WORKER}.items() if c.CONCURRENT] == ["vllm_stop"]


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="vllm_bogus"):
        M.decode(M.TO_MASTER, "vllm_bogus", {"worker": "w"})
    with pytest.raises(ValueError, match="vllm_grant"):  # a worker's kind is not the master's
        M.decode(M.TO_MASTER, "vllm_grant", {"start": 0, "count": 1})


# the dicts the previous protocol code built, literally: the typed payloads must put the same bytes on the wire
OLD_WIRE: list[tuple[Any, str, dict[str, Any]]] = [
    (M.Need("w", 3), "vllm_need", {"worker": "w", "n": 3}),
    (M.First("w", 5.5), "vllm_first", {"worker": "w", "t": 5.5}),
    (M.Ready("w", 2), "vllm_ready", {"worker": "w", "users": 2}),
    (M.Done("w"), "vllm_done", {"worker": "w"}),
    (M.Stop(30.0), "vllm_stop", {"timeout": 30.0}),
    (M.Grant(4, 2), "vllm_grant", {"start": 4, "count": 2}),
    (M.Rate([[0.0, 1.0]]), "vllm_rate", {"segments": [[0.0, 1.0]]}),
    (M.T0(9.25), "vllm_t0", {"t0": 9.25}),
]


@pytest.mark.parametrize(("msg", "kind", "old"), OLD_WIRE, ids=lambda x: getattr(x, "KIND", "") or None)
def test_the_wire_bytes_are_the_previous_protocols(msg: Any, kind: str, old: dict[str, Any]) -> None:
    assert Message(msg.KIND, msg.to_payload(), "n").serialize() == Message(kind, old, "n").serialize()


def _rec(i: int) -> RequestRecord:
    c = [1000 + 500 * k for k in range(4)]
    return RequestRecord(
        "chat", "w", 0, i, "chat", 1.7e9 + i, chunk_times_us=c, end_us=c[-1], output_tokens=4
    )


def test_a_workers_batch_has_the_previous_wire_bytes() -> None:
    ctx = WorkerContext(Options(), 0, 1, lambda m: None)
    ctx.calibration = {"words_per_token": 0.75}
    for i in range(3):
        ctx.submit(_rec(i))
    b = ctx.take_batch()
    old = {
        "worker": b.worker,
        "n": 3,
        "health": b.health,
        "calibration": {"words_per_token": 0.75},
        "final": False,
        "total": 3,
        "totals": b.totals,
        "cols": b.cols,
        "hists": b.hists,
        "records": b.records,
        "sent_at": b.sent_at,
    }
    assert (
        Message("vllm_batch", b.to_payload(), "n").serialize() == Message("vllm_batch", old, "n").serialize()
    )
    assert b.cols and b.records.count("\n") == 2 and b.totals and b.totals["ok"] == 3


class _Runner:
    """A stand-in for Locust's runner: what is registered and what is sent."""

    def __init__(self) -> None:
        self.handlers: dict[str, tuple[Any, bool]] = {}
        self.sent: list[tuple[str, Any, str | None]] = []

    def register_message(self, kind: str, listener: Any, concurrent: bool = False) -> None:
        self.handlers[kind] = (listener, concurrent)

    def send_message(self, kind: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append((kind, data, client_id))


def test_register_hands_each_kind_decoded_to_its_handler() -> None:
    runner = _Runner()
    got: list[tuple[Any, str]] = []
    M.register(runner, M.TO_WORKER, lambda msg, node: got.append((msg, node)))  # type: ignore[arg-type]
    assert (
        {k: c for k, (_, c) in runner.handlers.items()}
        == {
            "vllm_stop": True,
            "vllm_grant": False,
            "vllm_rate": False,
            "vllm_t0": False,
            "vllm_clock_pong": False,  # handled at once: its receipt is stamped, and a queue would lengthen the trip
        }
    )
    listener, _ = runner.handlers["vllm_grant"]
    listener(environment=None, msg=_wire("vllm_grant", {"start": 3, "count": 5}))
    assert got == [(M.Grant(3, 5), "node-1")]


class _Ctx:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def drain(self, timeout: float) -> None:
        self.calls.append(("drain", timeout))

    def on_grant(self, start: int, count: int) -> None:
        self.calls.append(("grant", (start, count)))

    def set_segments(self, segments: list[list[float]]) -> None:
        self.calls.append(("segments", segments))

    def on_t0(self, t0: float) -> None:
        self.calls.append(("t0", t0))


def test_to_workers_calls_a_local_runners_own_context() -> None:
    ctx = _Ctx()
    for msg in (M.Stop(2.0), M.Grant(0, 3), M.Rate([[0.0, 5.0]]), M.T0(7.0)):
        M.to_workers(None, ctx, msg)
    assert ctx.calls == [("drain", 2.0), ("grant", (0, 3)), ("segments", [[0.0, 5.0]]), ("t0", 7.0)]
    M.to_workers(None, None, M.Stop(1.0))  # no context yet (before the test started): nothing to do


def test_to_workers_sends_from_a_master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(M, "MasterRunner", _Runner)
    runner, ctx = _Runner(), _Ctx()
    M.to_workers(runner, ctx, M.Grant(8, 2), "c7")  # type: ignore[arg-type]
    M.to_workers(runner, ctx, M.Stop(3.0))  # type: ignore[arg-type]
    assert runner.sent == [
        ("vllm_grant", {"start": 8, "count": 2}, "c7"),
        ("vllm_stop", {"timeout": 3.0}, None),
    ]
    assert ctx.calls == []


def test_a_batch_payload_is_read_leniently_as_before() -> None:
    b = M.Batch.from_payload({"worker": "w0", "n": 0, "hists": {}, "final": False, "totals": {"ok": 1}})
    assert b.records == "" and b.health == {} and b.sent_at is None and b.calibration is None
    fresh = M.Batch.from_payload(M.Batch("w", 0, "", {}, {}, sent_at=time.time()).to_payload())
    assert fresh.class_hists is None and "class_hists" not in fresh.to_payload()
