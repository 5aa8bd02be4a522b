"""The probe's progress through its phases (orchestration.twin.phases): their order, the later rounds a fast server
leaves time for, and what `vllm-locust calibrate` prints meanwhile: one line when a phase starts (what it sends)
and one when it ends (how long it took and what it measured), numbered "phase k/N"; each later round one line
each way. Never a line per request: a probe of 180 s prints about thirty lines."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from orchestration.twin.apiphase import api_phase
from orchestration.twin.phases import (
    ProbePlan,
    batch_phase,
    context_lengths,
    context_phase,
    prefix_phase,
    saturation_phase,
    tpot_phase,
    ttft_phase,
    warmup,
)
from orchestration.twin.probe import Probe

__all__ = [
    "PHASES",
    "ROUND_PHASES",
    "Phase",
    "PhaseLog",
    "Tally",
    "describe",
    "measured",
    "run_phases",
    "tally",
]

Phase = Callable[[Probe, ProbePlan, dict[str, Any]], None]


def _warmup(probe: Probe, _plan: ProbePlan, raw: dict[str, Any]) -> None:
    warmup(probe, raw)


# the first pass, in the order of what the twin needs most; the later rounds repeat the point phases
PHASES: tuple[tuple[str, Phase], ...] = (
    ("warmup", _warmup),
    ("ttft", ttft_phase),
    ("tpot", tpot_phase),
    ("context", context_phase),
    ("batch", batch_phase),
    ("saturation", saturation_phase),
    ("prefix", prefix_phase),
    ("api", api_phase),
)
ROUND_PHASES = ("ttft", "tpot", "context", "batch")


def describe(name: str, plan: ProbePlan) -> str:
    """What phase `name` sends under `plan`, in a few words (its start line)."""
    lengths = "/".join(str(n) for n in plan.lengths)
    batches = ",".join(str(c) for c in plan.concurrencies)
    return {
        "path": "the simulator's own latency on this machine at the server's step (2 requests to the server, "
        "then a local simulator; taken out of the fit)",
        "warmup": "2 short requests (the server's first-request costs, the prompt's tokens per word)",
        "ttft": f"{len(plan.lengths) * plan.repeats} requests one at a time, prompts of {lengths} tokens "
        f"x {plan.repeats}",
        "tpot": f"batches of {batches} streams started together, {plan.decode_tokens} tokens each (x3 at 1, x2 "
        "the others)",
        "context": f"{plan.context_concurrency} stream after prompts of "
        f"{'/'.join(str(n) for n in context_lengths(plan))} tokens in turn x {plan.context_repeats}",
        "batch": f"up to {max(plan.concurrencies)} streams of a {max(plan.lengths)}-token prompt at once",
        "saturation": f"{plan.saturation_requests} streams at once, /metrics every 50 ms",
        "prefix": f"a {max(plan.lengths)}-token prompt twice in a row, 2 pairs",
        "api": f"the API server: {plan.api_requests} requests of 1 token at once at "
        f"{'/'.join(str(n) for n in plan.api_lengths)} prompt tokens, then {plan.api_streams} streams of "
        f"{plan.api_tokens} tokens (and the same on a local simulator first)",
    }.get(name, name)


@dataclass(frozen=True)
class Tally:
    """Counts in the probe's raw record at one moment (a phase's work is the difference across it)."""

    requests: int
    failed: int
    ttft: int
    tpot: int
    bursts: int
    prefix: int


def tally(raw: dict[str, Any], requests: int) -> Tally:
    """The counts of `raw` now, with the probe's `requests` sent so far."""
    return Tally(
        requests=requests,
        failed=sum(int(v) for v in (raw.get("errors") or {}).values()),
        ttft=len(raw.get("ttft") or []),
        tpot=len(raw.get("tpot") or []),
        bursts=len(raw.get("bursts") or []),
        prefix=len(raw.get("prefix") or []),
    )


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2.0


def measured(name: str, before: Tally, raw: dict[str, Any], after: Tally) -> str:
    """What phase `name` (or a round: "round") measured, in a few words: the requests it sent, the points it
    added to `raw` and, where one number sums it up, that number (the warm-up's tokens per word, the
    saturation's seat limit, the prefix pairs' median TTFTs)."""
    failed = after.failed - before.failed
    parts = [_n(after.requests - before.requests, "request") + (f" ({failed} failed)" if failed else "")]
    if name == "warmup" and raw.get("tokens_per_word"):
        parts.append(f"{raw['tokens_per_word']:.2f} prompt tokens per word")
    for key, word, phases in (
        ("ttft", "TTFT point", ("ttft", "round")),
        ("tpot", "TPOT point", ("tpot", "context", "round")),
        ("bursts", "burst", ("batch", "round")),
    ):
        if name in phases:
            parts.append(_n(getattr(after, key) - getattr(before, key), word))
    if name == "saturation":
        sat = raw.get("saturation") or {}
        seats, most = sat.get("max_running_while_waiting"), sat.get("max_running")
        if seats is not None:
            parts.append(f"seat limit {seats:g} (running while others waited)")
        elif most is not None:
            parts.append(f"at most {most:g} running, no seat limit seen")
        else:
            parts.append("no running count in /metrics")
    if name == "prefix":
        pairs = (raw.get("prefix") or [])[before.prefix :]
        parts.append(_n(len(pairs), "cold/warm pair"))
        if pairs:
            cold, warm = _median([p["cold_ms"] for p in pairs]), _median([p["warm_ms"] for p in pairs])
            parts.append(f"TTFT {cold:.0f} ms cold, {warm:.0f} ms warm (medians)")
    if name == "api":
        parts.append(_n(len(raw.get("api") or []), "API-server burst"))
    return ", ".join(parts)


@dataclass
class PhaseLog:
    """The progress lines of one probe: `write` gets each line; `total` counts the phases of the first pass
    (the simulator's own latency among them); `clock` gives seconds (monotonic)."""

    write: Callable[[str], None]
    total: int
    clock: Callable[[], float] = time.monotonic
    started: int = 0

    def note(self, text: str) -> None:
        """A line of its own (the budget spent, a phase skipped)."""
        self.write(text)

    @contextmanager
    def span(self, tag: str, doing: str, result: Callable[[], str]) -> Iterator[None]:
        """`tag: doing` now; `tag done in S s: result()` when the block ends (`interrupted after S s` on Ctrl-C)."""
        self.write(f"{tag}: {doing}")
        t0 = self.clock()
        try:
            yield
        except KeyboardInterrupt:
            self.write(f"{tag}: interrupted after {self.clock() - t0:.1f} s")
            raise
        text = result()
        self.write(f"{tag} done in {self.clock() - t0:.1f} s" + (f": {text}" if text else ""))

    def phase(self, name: str, doing: str, result: Callable[[], str]) -> Any:
        """The next numbered phase of the first pass (a `span` tagged `phase k/N name`)."""
        self.started += 1
        return self.span(f"phase {self.started}/{self.total} {name}", doing, result)


def _run_one(
    name: str, phase: Phase, probe: Probe, plan: ProbePlan, raw: dict[str, Any], log: PhaseLog | None
) -> None:
    if log is None:
        phase(probe, plan, raw)
        return
    before = tally(raw, probe.requests)
    with log.phase(
        name, describe(name, plan), lambda: measured(name, before, raw, tally(raw, probe.requests))
    ):
        phase(probe, plan, raw)


def _round(
    log: PhaseLog,
    tag: str,
    again: Sequence[tuple[str, Phase]],
    probe: Probe,
    plan: ProbePlan,
    raw: dict[str, Any],
) -> None:
    """One more round of the point phases, a start and an end line around it."""
    before = tally(raw, probe.requests)
    names = ", ".join(n for n, _ in again)
    doing = f"{names} again (the budget allows: more points, a tighter fit)"
    with log.span(tag, doing, lambda: measured("round", before, raw, tally(raw, probe.requests))):
        for _, phase in again:
            phase(probe, plan, raw)


def run_phases(
    probe: Probe,
    plan: ProbePlan,
    raw: dict[str, Any],
    log: PhaseLog | None = None,
    phases: Sequence[tuple[str, Phase]] = PHASES,
) -> None:
    """Run every phase into `raw` while the budget lasts (a KeyboardInterrupt leaves what was measured), then more
    rounds of the point phases while the probe has used less than `plan.fill` of its budget; `log` gets a start
    and an end line per phase and per round."""
    if probe.budget.left() <= 0:
        return
    for i, (name, phase) in enumerate(phases):
        if probe.budget.left() <= 0:
            if log is not None:
                skipped = ", ".join(n for n, _ in phases[i:])
                log.note(f"budget spent after {probe.budget.elapsed():.0f} s: skipped {skipped}")
            break
        _run_one(name, phase, probe, plan, raw, log)
        raw["phases_done"].append(name)
    rounds = 1
    total = probe.budget.deadline - probe.budget.start
    again = [(n, p) for n, p in phases if n in ROUND_PHASES]
    while rounds < plan.max_rounds and probe.budget.elapsed() < plan.fill * total and probe.budget.left() > 0:
        rounds += 1
        if log is None:
            for _, phase in again:
                phase(probe, plan, raw)
        else:
            _round(log, f"round {rounds}/{plan.max_rounds}", again, probe, plan, raw)
    raw["rounds"] = rounds
