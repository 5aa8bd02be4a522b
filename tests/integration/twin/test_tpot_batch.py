"""A TPOT point's batch on a server faster than the probe's /metrics scrapes: streams started together are one
batch, whatever the scrapes saw (~3 s)."""

from __future__ import annotations

from orchestration.twin.phases import ProbePlan, _tpot_point
from orchestration.twin.probe import Budget, Probe
from vllm_sim.launch import start_simulator


def test_a_burst_shorter_than_the_scrape_period_keeps_its_batch() -> None:
    """16 streams of 48 tokens at 1.5 ms a step decode in ~75 ms, under one 0.1-s scrape period. The scrapes alone
    read a batch below the 16 that ran (an H100's 2-32-stream points read 1), and the fit took a batch of 16's
    TPOT as a smaller one's; the client's own times say 16. On the dev box, eight such bursts each: the scrapes
    alone read 8-16 (9-16 with both cores busy with other work) and 16 in at most a third of them, the client's
    count 16 in every one."""
    fast = ["--decode-step-ms", "1.5", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "1e9"]
    with start_simulator(["--model", "m", *fast]) as sim:
        probe = Probe(sim.url, "m", Budget(60.0))
        raw: dict = {"tpot": [], "errors": []}
        for _ in range(8):
            _tpot_point(probe, ProbePlan(), raw, 16, 32)
    batches = [p["batch"] for p in raw["tpot"]]
    assert len(batches) == 8 and min(batches) >= 13 and sum(b == 16 for b in batches) >= 6, batches
