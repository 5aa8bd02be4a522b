"""The own-path measurement runs its local simulator at the server's own step: the excess depends on the step (a
2-core VM read 0.25-0.6 ms at 9-10 ms steps and about 0 at 1-7 and 11-20 ms), so a fixed 10-ms step took 0.4 ms
off a 2-ms server's TPOT, and the twin then served 27 % fast at low load."""

from __future__ import annotations

import pytest

from orchestration.twin.ownpath import PATH_STEP_MS, PATH_STEP_RANGE_MS, path_latency, server_step_ms
from orchestration.twin.probe import Budget, Probe
from vllm_sim.launch import start_simulator

pytestmark = pytest.mark.timeout(120)


def test_the_server_step_is_read_from_one_stream() -> None:
    with start_simulator(
        ["--decode-step-ms", "3", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "1e9"]
    ) as sim:
        step = server_step_ms(Probe(sim.url, "sim-model", Budget(30)))
    # the simulator's step is 3 ms (its lateness absorbed up to 1 ms a step); what else a stream gives is far from
    # it: its TTFT or its whole time (tens of ms)
    assert step is not None and 2.5 < step < 9.0, step


def test_the_local_simulator_runs_at_the_step_it_is_given() -> None:
    lo, hi = PATH_STEP_RANGE_MS
    got = path_latency(30.0, batches=(1,), n=3, step_ms=lo / 5)  # below the range: its bound
    assert got is not None and got["step_ms"] == lo
    (point,) = got["tpot"]
    # the excess is against the step it says: at 10 ms (the old fixed step) a 1-ms reading would be -9 ms
    assert -0.5 < point["excess_ms"] < 8.0, got
    assert path_latency(30.0, batches=(), n=3)["step_ms"] == PATH_STEP_MS  # unknown: the default
    assert path_latency(30.0, batches=(), n=3, step_ms=10 * hi)["step_ms"] == hi
