"""The rules across option groups, in one place: each group checks its own options (its `check()`, beside its
fields), and `Options` runs both wherever one is built (vllm_users.options), `vllm-locust run` and plain
`locust -f` alike. A rule that needs more than the options (a file, the user classes, the server) is not here: the
command that has it checks it (orchestration.commands.run's `validate`)."""

from __future__ import annotations

from typing import Protocol

from vllm_users.capacity_options import CapacityOptions, parse_sweep
from vllm_users.distributed.options import LoadOptions
from vllm_users.errors import UsageError
from vllm_users.measure.options import MeasureOptions
from vllm_users.scenarios.options import ScenarioOptions
from vllm_users.workload.classes import ClassOptions, parse_class
from vllm_users.workload.trace_schedule import TraceOptions

__all__ = ["Groups", "check_across"]


class Groups(Protocol):
    """The option groups these rules read (an `Options`: vllm_users.options imports this module)."""

    @property
    def trace(self) -> TraceOptions: ...
    @property
    def load(self) -> LoadOptions: ...
    @property
    def scenario(self) -> ScenarioOptions: ...
    @property
    def measure(self) -> MeasureOptions: ...
    @property
    def classes(self) -> ClassOptions: ...
    @property
    def capacity(self) -> CapacityOptions: ...


def check_across(o: Groups) -> None:
    """The rules that span option groups (UsageError with one line)."""
    _trace(o)
    _find_max_rate(o)
    _sweep(o)


def _trace(o: Groups) -> None:
    """--trace is the schedule and the requests (its user is the `trace` scenario): nothing else sets them."""
    if not o.trace.trace:
        return
    for given, name in (
        (o.load.request_rate is not None, "--request-rate"),
        (o.load.users is not None, "--users"),
        (bool(o.load.ramp_up_strategy), "--ramp-up-strategy"),
        (bool(o.scenario.locustfile), "-f"),
        (o.scenario.scenario not in ("", "trace"), "--scenario"),
    ):
        if given:
            raise UsageError(f"--trace replays the trace's own schedule and requests: leave out {name}")


def _find_max_rate(o: Groups) -> None:
    """--find-max-rate judges each rate against an SLO, and chooses the rates itself."""
    if not o.capacity.find_max_rate:
        return
    if not o.measure.goodput and not _class_slos(o.classes.class_):
        raise UsageError(
            "--find-max-rate needs the SLO: --goodput ttft:MS tpot:MS [e2el:MS] (or a --class "
            "with ttft=, tpot= or e2el=)"
        )
    if (
        o.load.users is not None
        or o.load.request_rate is not None
        or o.capacity.sweep
        or o.load.ramp_up_strategy
    ):
        raise UsageError(
            "--find-max-rate chooses the rates itself: leave out --users, --request-rate, --sweep "
            "and --ramp-up-strategy"
        )


def _sweep(o: Groups) -> None:
    """A concurrency sweep is closed loop: each step sets its users."""
    c = o.capacity
    kind = parse_sweep(c.sweep).kind if c.sweep else "concurrency" if c.concurrency_sweep else ""
    if kind == "concurrency" and o.load.request_rate is not None:
        raise UsageError("--sweep concurrency: runs closed loop: leave out --request-rate")


def _class_slos(texts: tuple[str, ...]) -> bool:
    """True when a --class names an SLO of its own (--find-max-rate then judges each class against its own)."""
    return any(parse_class(t).slo_ms() for t in texts)
