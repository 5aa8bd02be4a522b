"""`--repeats` repeats the run: against the simulator its repeats' spread is the spread of identical runs (this
machine's noise), and their interval overlaps the identical runs'. Repeat k used to send `seed: k` in every
body, and the simulator answered a whole run from that one seed: request_throughput read 17.07 ± 43.45."""

from __future__ import annotations

import json
import os
import statistics

import pytest

from tests.integration.core.helpers import cli
from vllm_users.measure import metric_keys as K

LOAD = ["--users", "8", "--num-prompts", "60", "--output-len", "48", "--warmup", "10r", "--workers", "1"]
METRICS = (K.REQUEST_THROUGHPUT, K.OUTPUT_THROUGHPUT, K.TPOT.key("median"))


def _value(run_dir: str, metric: str) -> float:
    with open(os.path.join(run_dir, "result.json")) as fh:
        return float(json.load(fh)[metric])


@pytest.mark.exclusive  # the noise is measured here: other jobs' load would change it between runs
@pytest.mark.timeout(600)
def test_repeats_spread_is_the_noise_of_identical_runs(tmp_path) -> None:
    tmp = str(tmp_path)
    r = cli([*LOAD, "--repeats", "3"], tmp, timeout=300, name="rep")
    assert r.rc == 0, r.logs()[-3000:]
    with open(os.path.join(r.run_dir, "repeats.json")) as fh:
        rep = json.load(fh)["metrics"]
    same = []  # the same run (one seed, one fresh simulator each) three times: the noise alone
    for i in range(3):
        s = cli(LOAD, tmp, timeout=200, name=f"same-{i}")
        assert s.rc == 0, s.logs()[-3000:]
        same.append(s.run_dir)
    for metric in METRICS:
        m = rep[metric]
        noise = [_value(d, metric) for d in same]
        mean, sd = statistics.fmean(noise), statistics.stdev(noise)
        floor = max(
            sd, 0.02 * mean
        )  # three identical runs may agree by chance: 2 % is this kind of run's least
        assert statistics.stdev(m["values"]) <= 4 * floor, (metric, m["values"], noise)
        half = m["ci_half_width"]
        assert half is not None and half <= 0.25 * m["mean"], (metric, m)
        t = 4.303  # 95 % two-sided, 2 degrees of freedom: the identical runs' own interval
        lo, hi = mean - t * sd / 3**0.5, mean + t * sd / 3**0.5
        assert m["ci_low"] <= max(hi, mean * 1.02) and min(lo, mean * 0.98) <= m["ci_high"], (
            metric,
            m,
            noise,
        )
