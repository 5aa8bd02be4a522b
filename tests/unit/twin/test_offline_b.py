"""The offline twin check over a trimmed part of the second H100 recording (tests/data/twin_h100b_trim): it reads
the twin the device served as the device did, and the fit of this checkout answers near vLLM with a range that
holds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.twin_offline import check, refit

CORPUS = Path(__file__).resolve().parents[2] / "data" / "twin_h100b_trim"

# what the device read on this recording's round 1 (the corpus's README): the twin's answer and the loads' errors
DEVICE_TWIN_ANSWER = 175.79
DEVICE_LOADS = {
    "closed-32": (-0.517, -0.029, 0.085),
    "poisson-20/s": (0.102, -0.249, -0.027),
    "long-prompt-3500": (-0.059, 0.051, 0.030),
}
KEYS = ("ttft_ms_median", "tpot_ms_median", "output_tok_s")


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return check(str(CORPUS))


def test_the_recorded_twin_reads_as_the_device_did() -> None:
    """The constants as recorded are the twin the device served: its answer within 5 % of the device's twin's
    (175.79 req/s; the replay said 172.75), every load's error within 10 points of the device's (the device's twin
    run is one sample, served beside its load generator: the closed loop's TTFT reads -59.5 against -51.7 %)."""
    res = check(str(CORPUS), as_recorded=True, with_range=False)
    (r,) = res["rounds"]
    assert r["twin"] == pytest.approx(DEVICE_TWIN_ANSWER, rel=0.05)
    assert res["find_max_rate_error"] > 0.6  # the device: +88.7 % on this round
    for load, device in DEVICE_LOADS.items():
        for k, want in zip(KEYS, device, strict=True):
            assert res["load_errors"][load][k] == pytest.approx(want, abs=0.10), (load, k)


def test_the_bursts_rate_keeps_the_api_servers_tokenizing() -> None:
    """The one burst's 251k tok/s is the engine's own (its requests' tokenizing overlapped the prefills before
    them); taking the API server's 1.95 µs per prompt token out of it made 492k, and the twin held 173 req/s
    where vLLM held 93."""
    c = refit(json.loads((CORPUS / "twin.json").read_text()))
    rate = c["prefill_tokens_per_s"]
    assert rate["source"] == "burst" and 220e3 < rate["value"] < 280e3
    assert c["api_prompt_token_cost_us"]["value"] > 1.0  # the stage still pays it, per request


def test_the_context_term_is_bounded_by_the_burst() -> None:
    """The context phase left the term at 0 ± 0.37 µs per token; the burst's whole decode TPOT over its 97k
    context tokens bounds it at 0.052 µs, and the answer's range narrows from [9, 186] to about [72, 136]."""
    c = refit(json.loads((CORPUS / "twin.json").read_text()))
    ctx = c["decode_per_ctx_token_us"]
    assert ctx["value"] + ctx["uncertainty"] == pytest.approx(0.0518, abs=0.002)
    assert "at most" in ctx["note"]


def test_the_refitted_twin_answers_near_vllm_with_a_range_that_holds_it(result: dict[str, Any]) -> None:
    assert abs(result["find_max_rate_error"]) < 0.35  # +31 % on this round (the two rounds: +22.9 %)
    span = result["find_max_rate_range"]
    assert span["holds_server"] and span["high"] - span["low"] < 0.8 * span["server"]
    # bounded, not resolved: still named
    assert result["unresolved"] == ["decode_per_ctx_token_us", "api_chunk_cost_us"]


def test_a_chunk_cost_the_burst_only_bounds_is_the_middle_of_its_bound() -> None:
    """The chunk burst's 64 streams went out at the engine's rate (3,552 chunks over 292 ms; the clients' TPOT
    1.4 % above the engine's): the API server took at most 82 µs a chunk. Left out, the twin's process sat idle
    under a stream of writes; the middle of [0, 82] with half of it either way carries what is known."""
    c = refit(json.loads((CORPUS / "twin.json").read_text()))
    chunk = c["api_chunk_cost_us"]
    assert chunk["value"] == pytest.approx(1000 * 0.08218 / 2) and chunk["uncertainty"] == chunk["value"]
    assert chunk["note"].startswith("bounded, not measured")
