"""A live open loop states the load it was given: one the simulator keeps up with is delivered; one held back by
--max-concurrency is flagged in the summary and result.json (`--request-rate 20 --max-concurrency 64` achieved
12.71 req/s with goodput 100 % and no word said)."""

from __future__ import annotations

import json
import os

import pytest

from tests.integration.core.helpers import cli
from vllm_users.measure import metric_keys as K

LOAD = ["--workers", "1", "--input-len", "32", "--output-len", "32", "--ignore-eos", "--goodput", "ttft:5000"]


def _delivery(run_dir: str) -> dict:  # type: ignore[type-arg]
    with open(os.path.join(run_dir, "result.json")) as fh:
        return dict(json.load(fh)[K.DELIVERY])


@pytest.mark.timeout(300)
def test_a_held_back_open_loop_is_flagged_and_a_kept_one_is_not(tmp_path) -> None:
    tmp = str(tmp_path)
    kept = cli([*LOAD, "--request-rate", "8", "--num-prompts", "80"], tmp, name="kept")
    assert kept.rc == 0, kept.logs()[-3000:]
    d = _delivery(kept.run_dir)
    assert d["delivered"] and "NOT DELIVERED" not in kept.out and "Offered / achieved req/s" in kept.out
    held = cli(
        [*LOAD, "--request-rate", "60", "--max-concurrency", "2", "--num-prompts", "120"], tmp, name="held"
    )
    assert held.rc == 0, held.logs()[-3000:]
    d = _delivery(held.run_dir)
    assert not d["delivered"] and d["achieved_fraction"] < 0.9
    assert "NOT DELIVERED" in held.out and "not delivered" in held.out
    assert d["goodput_of_offered"] < 0.9  # the goodput against the completions alone reads 100 %
