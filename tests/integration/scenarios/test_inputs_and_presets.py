"""Bad input fails before any load with one line and exit 2; datasets drive chat; presets and the MoE sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vllm_users.exit_codes import USAGE

from .runner import succeeded, vllm_locust

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data")


def _usage_error(tmp_path, *args: str) -> str:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "run",
            *args,
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "bad",
            "--workers",
            "1",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == USAGE, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-locust: error: ") and "Traceback" not in p.stderr
    assert not os.path.exists(os.path.join(tmp_path, "bad"))  # nothing started, no run directory
    return lines[0]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "not found"),
        ("", "is empty"),
        ('{"prompt": "ok"}\n{"prompt": "ok"}\n{"prompt": \n', "line 3: not valid JSON"),
        ('{"prompt": "ok"}\n{"text": "x"}\n', "line 2: needs a non-empty 'prompt'"),
    ],
)
def test_bad_dataset_fails_before_load(tmp_path, content: str | None, match: str) -> None:
    path = tmp_path / "data.jsonl"
    if content is not None:
        path.write_text(content)
    line = _usage_error(tmp_path, "--dataset", str(path))
    assert str(path) in line and match in line


def test_unknown_scenario_bad_schema_and_complexity(tmp_path) -> None:
    assert "unknown scenario 'jsonn'" in _usage_error(tmp_path, "--scenario", "chat,jsonn")
    bad = tmp_path / "schema.json"
    bad.write_text('{"type": "object", "required": "name"}')
    line = _usage_error(tmp_path, "--scenario", "json", "--json-schema", str(bad))
    assert str(bad) in line and "not valid JSON Schema" in line
    assert "--schema-complexity" in _usage_error(
        tmp_path, "--scenario", "json", "--schema-complexity", "deep"
    )
    assert "no such file" in _usage_error(tmp_path, "--tokenizer", str(tmp_path / "no-tokenizer"))


@pytest.mark.parametrize("name", ["sharegpt_sample.json", "prompts_sample.jsonl"])
def test_chat_with_dataset(tmp_path, name: str) -> None:
    r = vllm_locust(
        tmp_path,
        "--scenario",
        "chat",
        "--dataset",
        os.path.join(DATA, name),
        "--num-prompts",
        "12",
        "--users",
        "3",
        "--seed",
        "7",
    )
    assert succeeded(r), r.err
    assert not [w for w in r.result.get("warnings") or [] if "DATASET REUSED" in w]  # 12 of 24 prompts
    recs = r.records()
    assert len(recs) == 12 and all(
        x["prompt_tokens"] < 80 for x in recs
    )  # short dataset prompts, not 128 random
    if name.endswith(".jsonl"):
        assert {x["output_len"] for x in recs} & {16, 24, 32, 40, 48}  # the lines' max_tokens


def test_a_dataset_smaller_than_the_requests_is_said_with_its_cache_effect(tmp_path) -> None:
    """24 conversations for 72 requests: each prompt sent 3 times, and the simulator's prefix cache answers the
    resends' prompts; the result's warnings (and so the summary) say both."""
    r = vllm_locust(
        tmp_path,
        "--dataset",
        os.path.join(DATA, "sharegpt_sample.json"),
        "--num-prompts",
        "72",
        "--users",
        "4",
        "--output-len",
        "8",
    )
    assert succeeded(r), r.err
    (note,) = [w for w in r.result.get("warnings") or [] if "DATASET REUSED" in w]
    assert "has 24 prompts for 72 requests, so each prompt was sent 3.0 times" in note, note
    share = float(note.split("; ")[1].split("%")[0])
    assert share > 10.0 and "prefix cache" in note  # the resends' prompts came from the cache


def test_multiturn_with_sharegpt_dataset(tmp_path) -> None:
    r = vllm_locust(
        tmp_path,
        "--scenario",
        "multi-turn",
        "--dataset",
        os.path.join(DATA, "sharegpt_sample.json"),
        "--num-turns",
        "3",
        "--num-prompts",
        "12",
        "--users",
        "2",
        "--output-len",
        "8",
    )
    assert succeeded(r), r.err
    assert {x["turn"] for x in r.records()} == {0, 1, 2}


def test_latency_preset(tmp_path) -> None:
    r = vllm_locust(tmp_path, "--preset", "latency", "--num-prompts", "6", "--output-len", "16")
    assert succeeded(r), r.err
    res = r.result
    assert res["max_concurrent_requests"] == 1 and res["total_output_tokens"] == 6 * 16  # ignore_eos: exact
    from vllm_sim.tokenizer import CHAT_TOKENS_BASE, CHAT_TOKENS_PER_MESSAGE

    # 128 text tokens per prompt (vllm bench serve's definition) plus the simulator's chat template
    assert res["total_input_tokens"] == 6 * (128 + CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_BASE)


def test_moe_preset_sweep(tmp_path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "run",
            "--preset",
            "moe",
            "--concurrency-sweep",
            "1,2,4",
            "--num-prompts",
            "8",
            "--output-len",
            "16",
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "sweep",
            "--workers",
            "1",
            "--quiet",
            "--no-report",
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert p.returncode in (0, 5), p.stderr[-2000:]
    with open(tmp_path / "sweep" / "sweep.json") as fh:
        sweep = json.load(fh)
    steps = sweep["steps"]
    assert [s["concurrency"] for s in steps] == [1, 2, 4]
    assert all(os.path.exists(os.path.join(s["run_dir"], "result.json")) for s in steps)
    assert steps[0]["scaling_efficiency"] == pytest.approx(1.0)
    assert steps[2]["output_throughput"] > steps[0]["output_throughput"]
    for s in steps:
        e = s["expert_load"]
        assert e["experts"] == 16 and e["tokens"] > 0 and e["max_over_mean"] >= 1.0 and e["cv"] > 0
    assert "concurrency sweep" in p.stdout


def test_input_len_counts_prompt_text_exactly(tmp_path) -> None:
    """--input-len is the message text's token count (vllm bench serve's definition), calibrated through the
    simulator's /tokenize: the server counts exactly that plus its chat template, request by request."""
    from vllm_sim.tokenizer import CHAT_TOKENS_BASE, CHAT_TOKENS_PER_MESSAGE

    r = vllm_locust(
        tmp_path,
        "--scenario",
        "chat",
        "--num-prompts",
        "16",
        "--users",
        "2",
        "--input-len",
        "60",
        "--range-ratio",
        "0.5",
        "--output-len",
        "4",
        "--seed",
        "3",
    )
    assert succeeded(r), r.err
    recs = r.records()
    assert len(recs) == 16 and len({x["input_len"] for x in recs}) > 4  # lengths vary with --range-ratio
    template = CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_BASE
    assert all(x["prompt_tokens"] == x["input_len"] + template for x in recs)


@pytest.mark.parametrize("tokenize_api", ["llama.cpp", "none"])
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_exact_input_len_without_vllm_tokenize(tmp_path, tokenize_api: str, endpoint: str) -> None:
    """A server without vLLM's /tokenize (llama.cpp's shape, or none: usage.prompt_tokens probes), whose
    tokenizer splits our random words in pieces (3 characters a token, as llama.cpp's did): prompts still come
    out at exactly --input-len tokens of text, and the result says so."""
    from vllm_sim.tokenizer import CHAT_TOKENS_BASE, CHAT_TOKENS_PER_MESSAGE

    r = vllm_locust(
        tmp_path,
        "--endpoint",
        endpoint,
        "--num-prompts",
        "12",
        "--users",
        "2",
        "--input-len",
        "64",
        "--range-ratio",
        "0.5",
        "--output-len",
        "4",
        "--seed",
        "5",
        "--sim-args",
        f"--tokenize-api {tokenize_api} --chars-per-token 3",
    )
    assert succeeded(r), r.err
    template = CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_BASE if endpoint == "chat" else 0
    recs = r.records()
    assert len(recs) == 12 and len({x["input_len"] for x in recs}) > 3
    assert all(x["prompt_tokens"] == x["input_len"] + template for x in recs), [
        (x["input_len"], x["prompt_tokens"]) for x in recs
    ]
    chk = r.result["input_len_check"]
    source = "tokenize:llama.cpp" if tokenize_api == "llama.cpp" else "usage"
    assert chk["ok"] and chk["calibration"] == source and chk["server_overhead_tokens"] == template
    assert chk["off_fraction"] == 0.0 and "PROMPT LENGTHS OFF" not in r.out
