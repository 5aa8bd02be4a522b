"""calibrate's progress while it probes: one line as each phase starts (what it sends) and one as it ends (how
long it took, what it measured), numbered; a line per later round each way; never a line per request."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from orchestration.twin.phases import ProbePlan, new_raw
from orchestration.twin.probe import Budget
from orchestration.twin.progress import PhaseLog, describe, measured, run_phases, tally


@dataclasses.dataclass
class FakeProbe:
    """What run_phases reads of a probe: its budget and the requests it sent."""

    budget: Budget
    requests: int = 0


class Clock:
    """A clock that moves only when a phase says so."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _phase(clock: Clock, seconds: float, sent: int, points: dict[str, list[Any]], failed: int = 0) -> Any:
    def run(probe: FakeProbe, _plan: ProbePlan, raw: dict[str, Any]) -> None:
        clock.t += seconds
        probe.requests += sent
        for key, items in points.items():
            raw.setdefault(key, []).extend(items)
        if failed:
            raw["errors"]["timeout"] = raw["errors"].get("timeout", 0) + failed

    return run


def _fakes(clock: Clock) -> list[tuple[str, Any]]:
    ttft = [{"prompt_tokens": 32, "ttft_ms": 20.0}] * 12
    return [
        ("ttft", _phase(clock, 4.2, 12, {"ttft": ttft})),
        ("tpot", _phase(clock, 14.2, 63, {"tpot": [{"tpot_ms": 10.0}] * 11}, failed=2)),
        ("batch", _phase(clock, 1.5, 16, {"bursts": [{"streams": 16}]})),
        ("prefix", _phase(clock, 0.5, 4, {"prefix": [{"cold_ms": 900.0, "warm_ms": 40.0}] * 2})),
    ]


def test_one_line_as_each_phase_starts_and_ends() -> None:
    clock, lines = Clock(), list[str]()
    probe = FakeProbe(Budget(1000.0))
    log = PhaseLog(lines.append, 4, clock)
    plan = dataclasses.replace(ProbePlan(), max_rounds=1)  # no later round
    run_phases(probe, plan, new_raw(), log, _fakes(clock))  # type: ignore[arg-type]
    assert lines == [
        f"phase 1/4 ttft: {describe('ttft', plan)}",
        "phase 1/4 ttft done in 4.2 s: 12 requests, 12 TTFT points",
        f"phase 2/4 tpot: {describe('tpot', plan)}",
        "phase 2/4 tpot done in 14.2 s: 63 requests (2 failed), 11 TPOT points",
        f"phase 3/4 batch: {describe('batch', plan)}",
        "phase 3/4 batch done in 1.5 s: 16 requests, 1 burst",
        f"phase 4/4 prefix: {describe('prefix', plan)}",
        "phase 4/4 prefix done in 0.5 s: 4 requests, 2 cold/warm pairs, TTFT 900 ms cold, 40 ms warm (medians)",
    ]
    assert describe("ttft", plan) == "12 requests one at a time, prompts of 32/256/768/1536 tokens x 3"


def test_later_rounds_and_a_spent_budget_are_one_line_each_way() -> None:
    clock, lines = Clock(), list[str]()
    probe = FakeProbe(Budget(1000.0))
    log = PhaseLog(lines.append, 4, clock)
    # rounds while under `fill` of the budget: the fake clock does not move the budget's, so every round runs
    plan = dataclasses.replace(ProbePlan(), max_rounds=3, fill=1.0)
    raw = new_raw()
    run_phases(probe, plan, raw, log, _fakes(clock))  # type: ignore[arg-type]
    rounds = [x for x in lines if x.startswith("round ")]
    assert rounds == [
        "round 2/3: ttft, tpot, batch again (the budget allows: more points, a tighter fit)",
        "round 2/3 done in 19.9 s: 91 requests (2 failed), 12 TTFT points, 11 TPOT points, 1 burst",
        "round 3/3: ttft, tpot, batch again (the budget allows: more points, a tighter fit)",
        "round 3/3 done in 19.9 s: 91 requests (2 failed), 12 TTFT points, 11 TPOT points, 1 burst",
    ]
    assert len(lines) == 2 * 4 + 2 * 2 and raw["rounds"] == 3  # bounded: not a line per request
    # a budget spent in the second phase: the rest are skipped in one line
    clock, lines = Clock(), list[str]()
    probe = FakeProbe(Budget(1000.0))

    def spend(p: FakeProbe, _plan: ProbePlan, _raw: dict[str, Any]) -> None:
        p.budget.deadline = p.budget.start  # the deadline has passed

    phases = [_fakes(clock)[0], ("tpot", spend), *_fakes(clock)[2:]]
    run_phases(probe, plan, new_raw(), PhaseLog(lines.append, 4, clock), phases)  # type: ignore[arg-type]
    assert (
        len(lines) == 5
        and lines[-1].startswith("budget spent after ")
        and lines[-1].endswith(": skipped batch, prefix")
    )


def test_ctrl_c_in_a_phase_says_so_and_stops() -> None:
    clock, lines = Clock(), list[str]()

    def interrupted(_p: FakeProbe, _plan: ProbePlan, _raw: dict[str, Any]) -> None:
        clock.t += 2.0
        raise KeyboardInterrupt

    phases: list[tuple[str, Any]] = [("ttft", interrupted), ("tpot", interrupted)]
    with pytest.raises(KeyboardInterrupt):
        run_phases(
            FakeProbe(Budget(1000.0)),  # type: ignore[arg-type]
            ProbePlan(),
            new_raw(),
            PhaseLog(lines.append, 2, clock),
            phases,
        )
    assert lines[-1] == "phase 1/2 ttft: interrupted after 2.0 s" and len(lines) == 2


def test_what_the_saturation_phase_found() -> None:
    raw = new_raw()
    before = tally(raw, 0)
    raw["saturation"] = {"max_running": 64.0, "max_running_while_waiting": None}
    assert (
        measured("saturation", before, raw, tally(raw, 64))
        == "64 requests, at most 64 running, no seat limit seen"
    )
    raw["saturation"] = {"max_running": 33.0, "max_running_while_waiting": 32}
    assert measured("saturation", before, raw, tally(raw, 64)).endswith(
        "seat limit 32 (running while others waited)"
    )
