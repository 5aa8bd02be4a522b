"""The simulator with a twin profile (--twin), the twin's fixed cost per request (--request-overhead-ms) and the
terms added to a profile after version 1 (decode per context token, prefill per token pair)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_sim import probe
from vllm_sim.config import parse_config
from vllm_sim.launch import start_simulator
from vllm_sim.twin import CONSTANTS, KIND, VERSION

PROFILE: dict[str, Any] = {
    "kind": KIND,
    "version": VERSION,
    "server": {"model": "twin-of-m"},
    "constants": {
        "prefill_tokens_per_s": {"value": 1e9},
        "request_overhead_ms": {"value": 80.0},
        "decode_step_ms": {"value": 2.0},
        "decode_per_seq_ms": {"value": 0.0},
        "max_num_seqs": {"value": 3},
        "kv_cache_tokens": {"value": 40000},
        "block_size": {"value": 16},
        "max_model_len": {"value": 1000},
        "enable_prefix_caching": {"value": True},
    },
}


def _ttft_s(url: str, model: str, prompt: str = "a b c") -> float:
    r = probe.request(
        url,
        "/v1/completions",
        {"model": model, "prompt": prompt, "max_tokens": 2, "ignore_eos": True, "stream": True},
    )
    assert r.status == 200, r.body
    return r.events[0][0] - r.start


def test_a_twin_serves_with_its_constants(tmp_path: Path) -> None:
    assert set(PROFILE["constants"]) == set(CONSTANTS)
    path = tmp_path / "twin.json"
    path.write_text(json.dumps(PROFILE))
    with start_simulator(["--twin", str(path)]) as sim:
        models = probe.request(sim.url, "/v1/models").json()["data"][0]
        assert models["id"] == "twin-of-m" and models["max_model_len"] == 1000
        # the 80 ms overhead is in every TTFT (a lower bound: never flaky on a busy machine)
        assert min(_ttft_s(sim.url, "twin-of-m") for _ in range(3)) >= 0.080
        assert "twin" not in sim.stderr_text().lower()


def test_without_overhead_the_ttft_is_far_below_it(tmp_path: Path) -> None:
    path = tmp_path / "twin.json"
    path.write_text(json.dumps(PROFILE))
    # --sim-args style override beside --twin: the overhead off
    with start_simulator(["--twin", str(path), "--request-overhead-ms", "0"]) as sim:
        assert min(_ttft_s(sim.url, "twin-of-m") for _ in range(3)) < 0.080


@pytest.mark.parametrize("name", ["decode_per_ctx_token_us", "prefill_per_ctx_token_ns"])
def test_a_term_added_after_version_1_is_optional_in_a_profile(name: str) -> None:
    """A version-1 profile from before the term reads as a twin without it; one with it serves it."""
    from vllm_sim.twin import OPTIONAL, TwinError, twin_overrides, validate_twin

    assert name in OPTIONAL and name not in CONSTANTS
    validate_twin(PROFILE)
    assert twin_overrides(PROFILE)[name] == 0.0
    doc = json.loads(json.dumps(PROFILE))
    doc["constants"][name] = {"value": 2.5}
    assert twin_overrides(doc)[name] == 2.5
    doc["constants"][name] = {"value": -1.0}
    with pytest.raises(TwinError) as e:
        validate_twin(doc, "t.json")
    assert str(e.value) == f"t.json: constants.{name}.value must be >= 0, got -1.0"


def test_a_twin_serves_its_prefill_cost_per_token_pair(tmp_path: Path) -> None:
    """100 ns per token pair: a 2000-token prompt's first token takes 200 ms more (a lower bound: never flaky)."""
    doc = json.loads(json.dumps(PROFILE))
    doc["constants"].update(
        max_model_len={"value": 4000},
        request_overhead_ms={"value": 0.0},
        prefill_per_ctx_token_ns={"value": 100.0},
    )
    path = tmp_path / "twin.json"
    path.write_text(json.dumps(doc))
    assert parse_config(["--twin", str(path)]).prefill_per_ctx_token_ns == 100.0
    prompt = " ".join(f"w{i}" for i in range(2000))
    with start_simulator(["--twin", str(path)]) as sim:
        assert _ttft_s(sim.url, "twin-of-m", prompt) >= 0.199
    with start_simulator(["--twin", str(path), "--prefill-per-ctx-token-ns", "0"]) as sim:  # the what-if: off
        assert min(_ttft_s(sim.url, "twin-of-m", prompt) for _ in range(3)) < 0.15


def test_a_profiles_token_budget_is_optional_and_served() -> None:
    """max_num_batched_tokens came after version 1: without it the twin keeps the 8192 it was fitted with; with
    it, the twin's steps hold that many tokens, and a flag beside --twin still wins (the what-if)."""
    from vllm_sim.twin import OPTIONAL, TwinError, twin_overrides, validate_twin

    assert "max_num_batched_tokens" in OPTIONAL and twin_overrides(PROFILE)["max_num_batched_tokens"] == 8192
    doc = json.loads(json.dumps(PROFILE))
    doc["constants"]["max_num_batched_tokens"] = {"value": 2048}
    assert twin_overrides(doc)["max_num_batched_tokens"] == 2048
    doc["constants"]["max_num_batched_tokens"] = {"value": 0}
    with pytest.raises(TwinError) as e:
        validate_twin(doc, "t.json")
    assert str(e.value) == "t.json: constants.max_num_batched_tokens.value must be > 0"


def test_a_twins_token_budget_reaches_the_simulator_and_a_flag_beside_it_wins(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(PROFILE))
    doc["constants"]["max_num_batched_tokens"] = {"value": 2048}
    path = tmp_path / "twin.json"
    path.write_text(json.dumps(doc))
    assert parse_config(["--twin", str(path)]).max_num_batched_tokens == 2048
    assert (
        parse_config(["--twin", str(path), "--max-num-batched-tokens", "8192"]).max_num_batched_tokens == 8192
    )


def test_a_profiles_api_server_stage_is_optional_and_served(tmp_path: Path) -> None:
    """The API-server constants came after version 1: a profile without them is a twin without the stage (today's
    behaviour); one with them serves the stage, and --api-server-count 0 beside it is the what-if without it."""
    from vllm_sim.twin import OPTIONAL, twin_overrides

    names = ("api_server_count", "api_request_cost_us", "api_prompt_token_cost_us", "api_chunk_cost_us")
    assert all(n in OPTIONAL and n not in CONSTANTS for n in names)
    assert [twin_overrides(PROFILE)[n] for n in names] == [0, 0.0, 0.0, 0.0]
    doc = json.loads(json.dumps(PROFILE))
    doc["constants"].update({n: {"value": v} for n, v in zip(names, (2, 300.0, 1.5, 40.0), strict=True)})
    path = tmp_path / "twin.json"
    path.write_text(json.dumps(doc))
    cfg = parse_config(["--twin", str(path)])
    assert (
        cfg.api_server_count,
        cfg.api_request_cost_us,
        cfg.api_prompt_token_cost_us,
        cfg.api_chunk_cost_us,
    ) == (
        2,
        300.0,
        1.5,
        40.0,
    )
    assert parse_config(["--twin", str(path), "--api-server-count", "0"]).api_server_count == 0
