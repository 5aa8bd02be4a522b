"""--preset is a layer under everything the user gives: its values fill only options left unset, skip those that
would contradict a given one, and keep the simulator's flags off a real server; a Locust process we start gets
no option variables and the API key under one name only."""

from __future__ import annotations

import pytest

from orchestration.settings.config import child_env
from orchestration.settings.presets import DESCRIPTIONS, PRESETS, preset_layer
from vllm_users.errors import UsageError
from vllm_users.options import GROUP_OF


def test_every_preset_sets_real_options_and_says_what_it_is_for() -> None:
    assert set(PRESETS) == set(DESCRIPTIONS)
    unknown = sorted(
        f"{name}.{dest}" for name, values in PRESETS.items() for dest in values if dest not in GROUP_OF
    )
    assert unknown == []


def test_a_preset_fills_only_what_the_user_left_unset() -> None:
    assert preset_layer("latency", {}) == PRESETS["latency"]
    got = preset_layer("latency", {"input_len": 999})
    assert "input_len" not in got and got["output_len"] == 128


def test_a_preset_value_that_contradicts_a_given_one_is_skipped() -> None:
    got = preset_layer("throughput", {"users": 4})  # closed loop given: no rate, no concurrency cap
    assert "request_rate" not in got and "max_concurrency" not in got and got["num_prompts"] == 512
    assert "scenario" not in preset_layer("prefix-caching", {"locustfile": "my.py"})
    assert "concurrency_sweep" not in preset_layer("moe", {"sweep": "1,2"})


def test_the_simulators_flags_stay_off_a_real_server() -> None:
    assert preset_layer("moe", {})["sim_args"] == PRESETS["moe"]["sim_args"]
    assert "sim_args" not in preset_layer("moe", {"host": "http://vllm:8000"})


def test_an_unknown_preset_is_one_line_naming_the_choices() -> None:
    with pytest.raises(UsageError, match="--preset 'fast': expected one of latency, long-short, moe"):
        preset_layer("fast", {})


def test_a_child_process_gets_no_option_variables_and_the_key_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("VLLM_LOCUST_INPUT_LEN", "7")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-old")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    env = child_env("sk-run", {"EXTRA": "1"})
    assert "VLLM_LOCUST_INPUT_LEN" not in env and "OPENAI_API_KEY" not in env
    assert env["VLLM_LOCUST_API_KEY"] == "sk-run" and env["SOMETHING_ELSE"] == "kept" and env["EXTRA"] == "1"
    assert "VLLM_LOCUST_API_KEY" not in child_env(None)
