"""The gate over many runs of one configuration, on generated samples: it does not call noise a change, and it
catches a real one.

21 runs of one closed-loop configuration (150 requests, none failed, 8 lanes, 16 tokens, log-normal TTFT and
TPOT per request: test_gate.synthetic), each at its own speed: a run-to-run drift of DRIFT (log-normal, the machine's load
and a restarted server between runs), which the gate's limits are also the margin for (orchestration.gate.verdict).
They give 20 A/A comparisons, consecutive pairs (1, 2), (2, 3), ...: at the default rules at most one may flag a
regression. The expected number of false alarms over 20 consecutive pairs is the same as over 20 disjoint pairs;
sharing runs only makes the count vary more (one odd run sits in two pairs), which makes "at most 1" harder to
meet, not easier. Three runs 15 % slower per decode step (their TPOT), each right after runs 5, 12 and 19 and at
that run's speed, are each flagged against it.

Why generated: the same 21 + 3 live runs against the simulator (tests/integration/report/test_gate_runs.py runs
two) measure this machine as much as the gate. On a 2-core box shared with other test runs (load average 5-19)
the runs' median TPOT moved by 7-12 % (coefficient of variation) from one run to the next: one such set flagged 2
of its 20 A/A pairs, another missed one 15 % slowdown (its baseline run had been slowed by the machine itself).
The gate's defaults hold at a drift of 2 % (these runs: 0 of 20 flagged); at 4 % 3 of 20 were flagged: an A/A
check over live runs needs a machine whose speed holds to ~2 % between runs.
"""

from __future__ import annotations

import numpy as np

from orchestration.gate.rules import parse_rules
from orchestration.gate.samples import RunSamples, Side
from orchestration.gate.verdict import gate
from tests.unit.gate.test_gate import synthetic
from vllm_users import exit_codes

RUNS = 21
SLOW_AFTER = (5, 12, 19)
DRIFT = 0.02  # run-to-run speed, log-normal sigma: a quiet machine of the same class
TPOT_MS, TTFT_MS = 10.0, 20.0


def _run(seed: int, speed: float, slower: float = 1.0) -> Side:
    r: RunSamples = synthetic(
        150, tpot_ms=TPOT_MS * speed * slower, ttft_ms=TTFT_MS * speed, fail=0.0, seed=seed
    )
    return Side(r.name, "run", [r])


def _runs() -> tuple[list[Side], dict[int, Side]]:
    speed = np.exp(np.random.default_rng(2024).normal(0.0, DRIFT, RUNS))
    same = [_run(i, float(speed[i - 1])) for i in range(1, RUNS + 1)]
    slow = {i: _run(1000 + i, float(speed[i - 1]), 1.15) for i in SLOW_AFTER}
    return same, slow


def test_noise_is_not_a_change() -> None:
    same, _ = _runs()
    rules = parse_rules(None)
    reports = [gate(a, b, rules) for a, b in zip(same, same[1:], strict=False)]
    flagged = [(i + 1, r.headline()) for i, r in enumerate(reports) if r.regressed]
    assert len(reports) == 20
    assert len(flagged) <= 1, flagged
    assert all(x.verdict == "unchanged" for r in reports for x in r.results if x.metric == "error_rate")


def test_a_slower_server_is_flagged_every_time() -> None:
    same, slow = _runs()
    rules = parse_rules(None)
    for i in SLOW_AFTER:
        rep = gate(same[i - 1], slow[i], rules)
        assert rep.exit_code == exit_codes.GATE_REGRESSED, rep.headline()
        tpot = next(r for r in rep.results if r.metric == "median_tpot_ms")
        assert tpot.verdict == "regressed" and tpot.change is not None and tpot.change > 5, tpot
