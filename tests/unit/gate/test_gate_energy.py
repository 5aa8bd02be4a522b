"""An energy regression is a regression: the gate reads result.json's `energy` figures (one value a run) and tests
them over --repeats by their declared direction (J per output token: lower is better)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orchestration.gate.rules import Rule, parse_rules
from orchestration.gate.samples import Side, energy_figures, load_side
from orchestration.gate.verdict import evaluate
from tests.unit.gate.test_gate import side, synthetic
from tests.unit.report.helpers import make_records, write_run
from vllm_users.measure import metric_keys as K


def _runs(j_per_token: float, seed: int) -> list:
    runs = [synthetic(seed=seed + k) for k in range(5)]
    for k, r in enumerate(runs):
        r.figures[K.ENERGY_PER_OUTPUT_TOKEN_J] = j_per_token * (1 + 0.005 * (k - 2))
    return runs


def test_more_joules_per_token_over_repeats_regress() -> None:
    (rule,) = parse_rules([f"{K.ENERGY_PER_OUTPUT_TOKEN_J}:5%"])
    assert rule.worse == "higher"
    worse = evaluate(rule, side(*_runs(0.20, 0)), side(*_runs(0.25, 50)), level=0.99)
    assert worse.verdict == "regressed" and worse.method.startswith("Welch t-interval over repeats")
    same = evaluate(rule, side(*_runs(0.20, 0)), side(*_runs(0.20, 50)), level=0.99)
    assert same.verdict != "regressed"
    better = evaluate(
        Rule(K.OUTPUT_TOKENS_PER_J, 5.0, "%"), side(*_runs(1, 0)), side(*_runs(1, 50)), level=0.99
    )
    assert better.verdict == "inconclusive"  # no such figure on these runs: not tested, never 0


def test_a_run_directorys_energy_block_reaches_the_figures(tmp_path: Path) -> None:
    run_dir = write_run(str(tmp_path / "r"), make_records(60))
    path = os.path.join(run_dir, "result.json")
    res = json.load(open(path))
    res["energy"] = {"available": True, K.ENERGY_J: 900.0, K.ENERGY_PER_OUTPUT_TOKEN_J: 0.3, "gpus": 1}
    json.dump(res, open(path, "w"))
    run = load_side(run_dir).runs[0]
    assert run.figures[K.ENERGY_PER_OUTPUT_TOKEN_J] == 0.3 and run.figures[K.ENERGY_J] == 900.0
    assert "gpus" not in energy_figures(res)
    assert isinstance(load_side(run_dir), Side)
