"""A TPOT point's batch on a server faster than the probe's /metrics scrapes: streams started together are one
batch, whatever the scrapes saw (~3 s)."""

from __future__ import annotations

from orchestration.twin.phases import ProbePlan, _tpot_point
from orchestration.twin.probe import Budget, Probe
from vllm_sim.launch import start_simulator


def test_a_burst_shorter_than_the_scrape_period_keeps_its_batch() -> None:
    """16 streams of 48 tokens at 0.5 ms a step decode in ~30 ms, under one 0.1-s scrape period. The scrapes
    alone read a batch of 1 on a fast GPU (an H100's 2-32-stream points did), and the fit took a batch of 16's
    TPOT as one stream's; the client's own times say 16 (14-16 here: this machine starts the 16 threads a few ms
    apart). The scrapes alone read 16, 16, 7, 1, 13 over five such points on the dev box."""
    fast = ["--decode-step-ms", "0.5", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "1e9"]
    with start_simulator(["--model", "m", *fast]) as sim:
        probe = Probe(sim.url, "m", Budget(60.0))
        raw: dict = {"tpot": [], "errors": []}
        for _ in range(6):
            _tpot_point(probe, ProbePlan(), raw, 16, 32)
    batches = [p["batch"] for p in raw["tpot"]]
    assert len(batches) == 6 and min(batches) >= 12 and max(batches) == 16, batches
