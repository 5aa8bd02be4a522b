"""The worker<->master protocol: every message kind with its payload as a typed class, the tables each side
registers its Locust handlers from, and the one way each side reaches the other (Locust's message between
processes, a direct call on a local runner).

On the wire a message is Locust's (kind, dict). `to_payload` gives the dict each kind has always carried, the
same keys in the same order, so a master and its workers of neighbouring versions still understand each other
(the one change: a --records-at-end chunk has the periodic batch's keys and order, `calibration` null among
them, which every reader takes as it took the key's absence); `from_payload` is the one reader of a received
dict, as lenient as the readers it replaced.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Protocol

from locust.env import Environment
from locust.rpc import Message
from locust.runners import MasterRunner, Runner, WorkerRunner

__all__ = [
    "TO_MASTER",
    "TO_WORKER",
    "Batch",
    "ClockPing",
    "ClockPong",
    "ClockReport",
    "Done",
    "First",
    "Grant",
    "MasterInbox",
    "Need",
    "Rate",
    "Ready",
    "Stop",
    "T0",
    "ToMaster",
    "ToWorker",
    "WorkerInbox",
    "decode",
    "register",
    "to_master",
    "to_workers",
]


class WorkerInbox(Protocol):
    """What the master's messages reach on a worker (its WorkerContext)."""

    def drain(self, timeout: float) -> None: ...
    def on_grant(self, start: int, count: int) -> None: ...
    def set_segments(self, segments: list[list[float]]) -> None: ...
    def on_t0(self, t0: float) -> None: ...
    def on_clock_pong(self, seq: int, t_master: float) -> None: ...


class MasterInbox(Protocol):
    """What the workers' messages reach on the master (its MasterPlugin); `client_id` is Locust's node id."""

    def on_batch(self, batch: Batch, client_id: str) -> None: ...
    def on_need(self, need: Need, client_id: str) -> None: ...
    def start_clock(self, why: str = "") -> None: ...
    def on_ready(self, worker: str, client_id: str) -> None: ...
    def on_done(self, worker: str) -> None: ...
    def on_clock_ping(self, ping: ClockPing, client_id: str) -> None: ...
    def on_clock_report(self, report: ClockReport) -> None: ...


_READ: dict[str, Callable[[Any], Any]] = {
    "int": int,
    "float": float,
    "str": str,
}  # a field's type -> its reader


class _Fields:
    """A payload that is its fields, in their order: {name: value, ...} on the wire."""

    CONCURRENT: ClassVar[bool] = False  # True: Locust runs its handler beside its own messages

    def to_payload(self) -> dict[str, Any]:
        """The dict Locust carries."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> Any:
        """The message in a received dict: a field with a default may be absent."""
        args: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            value = data[f.name] if f.default is MISSING else data.get(f.name, f.default)
            args[f.name] = _READ.get(str(f.type), _same)(value)
        return cls(**args)


def _same(value: Any) -> Any:
    return value


# ----- worker -> master -----
@dataclass(frozen=True, slots=True)
class Batch:
    """A worker's records, histograms, health and live totals since its last batch (one a second, a final one
    at the drain; --records-at-end: chunks of the local file before the final one)."""

    KIND: ClassVar[str] = "vllm_batch"
    CONCURRENT: ClassVar[bool] = False
    worker: str
    n: int  # records in `records` (and `cols`)
    records: str  # JSON lines, "\n"-joined
    hists: dict[str, str]  # HistogramSet.encode()
    health: dict[str, list[float]]  # HealthSampler.take()
    final: bool = False
    cols: bytes | None = None  # the records packed as columns (None: the master converts the JSON lines)
    calibration: dict[str, Any] | None = None
    total: int | None = None  # records this worker has made so far
    totals: dict[str, Any] | None = None  # live counts (progress line, web UI)
    class_hists: dict[str, str] | None = None  # runs with traffic classes only
    # runs with several endpoints or named replicas: "endpoints"/"replicas" -> HistogramSet.encode()
    group_hists: dict[str, dict[str, str]] | None = None
    sent_at: float | None = None  # wall clock: the master's ingest lag

    def to_payload(self) -> dict[str, Any]:
        """The dict Locust carries."""
        data: dict[str, Any] = {
            "worker": self.worker,
            "n": self.n,
            "health": self.health,
            "calibration": self.calibration,
            "final": self.final,
            "total": self.total,
            "totals": self.totals,
            "cols": self.cols,
            "hists": self.hists,
        }
        if self.class_hists is not None:
            data["class_hists"] = self.class_hists
        if self.group_hists is not None:
            data["group_hists"] = self.group_hists
        data["records"] = self.records
        data["sent_at"] = self.sent_at
        return data

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> Batch:
        """The batch in a received dict."""
        return cls(
            worker=data["worker"],
            n=data["n"],
            records=data.get("records", ""),
            hists=data["hists"],
            health=data.get("health") or {},
            final=bool(data.get("final")),
            cols=data.get("cols"),
            calibration=data.get("calibration"),
            total=data.get("total"),
            totals=data.get("totals"),
            class_hists=data.get("class_hists"),
            group_hists=data.get("group_hists"),
            sent_at=data.get("sent_at"),
        )

    def deliver(self, to: MasterInbox, client_id: str) -> None:
        """Hand it to the master."""
        to.on_batch(self, client_id)


@dataclass(frozen=True, slots=True)
class Need(_Fields):
    """Closed loop with a request budget: a worker asks for `n` more tickets."""

    KIND: ClassVar[str] = "vllm_need"
    worker: str
    n: int = 1

    def deliver(self, to: MasterInbox, client_id: str) -> None:
        """Hand it to the master."""
        to.on_need(self, client_id)


@dataclass(frozen=True, slots=True)
class First(_Fields):
    """A worker's first load request goes out now (--run-time counts from the run's first one)."""

    KIND: ClassVar[str] = "vllm_first"
    worker: str
    t: float  # wall clock

    def deliver(self, to: MasterInbox, client_id: str) -> None:
        """Hand it to the master."""
        to.start_clock()


@dataclass(frozen=True, slots=True)
class Ready(_Fields):
    """Open loop: every user of a worker waits for a ticket (the master agrees t0 once all workers are)."""

    KIND: ClassVar[str] = "vllm_ready"
    worker: str
    users: int

    def deliver(self, to: MasterInbox, client_id: str) -> None:
        """Hand it to the master."""
        to.on_ready(self.worker, client_id)


@dataclass(frozen=True, slots=True)
class Done(_Fields):
    """A worker used up its share of the requests."""

    KIND: ClassVar[str] = "vllm_done"
    worker: str

    def deliver(self, to: MasterInbox, client_id: str) -> None:
        """Hand it to the master."""
        to.on_done(self.worker)


@dataclass(frozen=True, slots=True)
class ClockPing(_Fields):
    """A worker asks for the master's wall clock (one round trip of its clock offset measurement)."""

    KIND: ClassVar[str] = "vllm_clock_ping"
    worker: str
    seq: int

    def deliver(self, to: MasterInbox, client_id: str) -> None:
        """Hand it to the master."""
        to.on_clock_ping(self, client_id)


@dataclass(frozen=True, slots=True)
class ClockReport(_Fields):
    """A worker's measured clock offset: master − worker, seconds, within ± uncertainty_s."""

    KIND: ClassVar[str] = "vllm_clock"
    worker: str
    offset_s: float
    uncertainty_s: float
    rtt_s: float
    probes: int

    def deliver(self, to: MasterInbox, client_id: str) -> None:
        """Hand it to the master."""
        to.on_clock_report(self)


# ----- master -> worker -----
@dataclass(frozen=True, slots=True)
class Stop(_Fields):
    """Finish in-flight streams within `timeout` s and send the final batch (handled beside Locust's own
    messages, so that a busy worker drains as soon as the master asks)."""

    KIND: ClassVar[str] = "vllm_stop"
    CONCURRENT: ClassVar[bool] = True
    timeout: float = 0.0

    def deliver(self, to: WorkerInbox) -> None:
        """Hand it to a worker."""
        to.drain(self.timeout)


@dataclass(frozen=True, slots=True)
class Grant(_Fields):
    """Tickets [start, start+count) of the request budget; count 0: the budget is used up."""

    KIND: ClassVar[str] = "vllm_grant"
    start: int
    count: int

    def deliver(self, to: WorkerInbox) -> None:
        """Hand it to a worker."""
        to.on_grant(self.start, self.count)


@dataclass(frozen=True, slots=True)
class Rate(_Fields):
    """Open loop: the global schedule's rate segments [offset s, rate] after a live rate change."""

    KIND: ClassVar[str] = "vllm_rate"
    segments: list[list[float]]

    def deliver(self, to: WorkerInbox) -> None:
        """Hand it to a worker."""
        to.set_segments(self.segments)


@dataclass(frozen=True, slots=True)
class T0(_Fields):
    """Open loop: the agreed start of the arrival schedule (wall clock)."""

    KIND: ClassVar[str] = "vllm_t0"
    t0: float

    def deliver(self, to: WorkerInbox) -> None:
        """Hand it to a worker."""
        to.on_t0(self.t0)


@dataclass(frozen=True, slots=True)
class ClockPong(_Fields):
    """The master's answer to a ClockPing: its wall clock when the ping arrived."""

    KIND: ClassVar[str] = "vllm_clock_pong"
    seq: int
    t: float

    def deliver(self, to: WorkerInbox) -> None:
        """Hand it to a worker."""
        to.on_clock_pong(self.seq, self.t)


ToMaster = Batch | Need | First | Ready | Done | ClockPing | ClockReport
ToWorker = Stop | Grant | Rate | T0 | ClockPong

# the handler tables: each kind a side receives, and the class that reads its payload
TO_MASTER: dict[str, type[ToMaster]] = {
    c.KIND: c for c in (Batch, Need, First, Ready, Done, ClockPing, ClockReport)
}
TO_WORKER: dict[str, type[ToWorker]] = {c.KIND: c for c in (Stop, Grant, Rate, T0, ClockPong)}


def decode(table: Mapping[str, type[Any]], kind: str, data: Mapping[str, Any]) -> Any:
    """The typed message of `kind` in `table` read from its payload; ValueError naming an unknown kind."""
    cls = table.get(kind)
    if cls is None:
        raise ValueError(f"unknown vllm-locust message kind {kind!r} (known: {', '.join(sorted(table))})")
    return cls.from_payload(data)


def register(runner: Runner, table: Mapping[str, type[Any]], deliver: Callable[[Any, str], None]) -> None:
    """Register with Locust one handler for each kind of `table`: it reads the payload and calls
    `deliver(message, sender's node id)`."""
    for kind, cls in table.items():
        runner.register_message(kind, functools.partial(_received, table, deliver), concurrent=cls.CONCURRENT)


def _received(
    table: Mapping[str, type[Any]],
    deliver: Callable[[Any, str], None],
    environment: Environment,
    msg: Message,
) -> None:
    deliver(decode(table, msg.type, msg.data), msg.node_id)


def to_workers(
    runner: Runner | None, local: WorkerInbox | None, msg: ToWorker, client_id: str | None = None
) -> None:
    """Send `msg` to every worker (or the one of `client_id`); a local runner hands it to its own context."""
    if isinstance(runner, MasterRunner):
        runner.send_message(msg.KIND, msg.to_payload(), client_id=client_id)
    elif local is not None:
        msg.deliver(local)


def to_master(runner: WorkerRunner) -> Callable[[ToMaster], None]:
    """A worker's way to send its messages to the master."""
    return lambda msg: runner.send_message(msg.KIND, msg.to_payload())
