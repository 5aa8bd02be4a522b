"""Traffic classes against real vLLM for CPU: two LoRA adapters of the tiny model made here by hand
(adapter_config.json + adapter_model.safetensors, written with torch and safetensors from the vLLM venv: no peft,
no download), a model mix sent per request, the preflight's check of every name, and `--scheduling-policy
priority`: under overload the high-priority class's TTFT p99 is lower.

One server for the module: `--enable-lora --lora-modules a=... b=... --scheduling-policy priority` with two seats
(`--max-num-seqs 2`), so that a closed loop of 12 users keeps a queue for the priority to reorder.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.e2e import speed
from tests.e2e.test_scenarios_real_vllm import run_vllm_locust
from tests.e2e.vllm_env import VllmEnv, VllmServer, start_vllm_server
from vllm_users.exit_codes import PREFLIGHT

ADAPTERS = ("lora-a", "lora-b")
RANK = 8
# the tiny Llama (tests/e2e/build_tiny_model.py): hidden 256, 4 heads x 64, 2 layers
MAKE_ADAPTER = r"""
import json, sys
import torch
from safetensors.torch import save_file
out, seed, layers, hidden, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
g = torch.Generator().manual_seed(seed)
t = {}
for i in range(layers):
    for m in ("q_proj", "v_proj"):
        p = f"base_model.model.model.layers.{i}.self_attn.{m}"
        t[p + ".lora_A.weight"] = (torch.randn(rank, hidden, generator=g) * 0.01).to(torch.bfloat16)
        t[p + ".lora_B.weight"] = (torch.randn(hidden, rank, generator=g) * 0.01).to(torch.bfloat16)
save_file(t, out + "/adapter_model.safetensors")
json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0,
           "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
           "modules_to_save": None, "base_model_name_or_path": "tiny-llama"}, open(out + "/adapter_config.json", "w"))
"""


def make_adapter(env: VllmEnv, out: Path, seed: int) -> Path:
    """A random rank-8 LoRA adapter of q_proj and v_proj, in peft's file layout."""
    import json

    cfg = json.loads((env.model_dir / "config.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            str(env.python),
            "-c",
            MAKE_ADAPTER,
            str(out),
            str(seed),
            str(cfg["num_hidden_layers"]),
            str(cfg["hidden_size"]),
            str(RANK),
        ],
        check=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def lora_server(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The tiny model with two LoRA adapters and priority scheduling, two seats."""
    root = tmp_path_factory.mktemp("adapters")
    mods = [f"{name}={make_adapter(vllm_env, root / name, i)}" for i, name in enumerate(ADAPTERS)]
    args = (
        "--enable-lora",
        "--max-lora-rank",
        str(RANK),
        "--max-loras",
        "2",
        "--lora-modules",
        *mods,
        "--scheduling-policy",
        "priority",
        "--max-num-seqs",
        "2",
    )
    with start_vllm_server(
        vllm_env,
        log_dir=tmp_path_factory.mktemp("vllm-logs-lora"),
        extra_args=args,
        startup_timeout=speed.scaled(600),
    ) as server:
        yield server


def test_model_mix_and_classes_over_two_adapters(lora_server: VllmServer, tmp_path: Path) -> None:
    """~1 min: most of it is starting vLLM with two LoRA adapters (its fixture)."""
    base = lora_server.model_name
    out = run_vllm_locust(
        lora_server.url,
        tmp_path,
        "mix",
        "--num-prompts",
        "24",
        "--users",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--model",
        f"{base}:1,lora-a:1,lora-b:1",
        "--class",
        "hi:weight=1,priority=0,model=lora-a",
        "--class",
        "lo:weight=1,priority=5",
    )
    assert out.result["failed"] == 0 and out.result["completed"] == 24
    by = Counter((r.request_class, r.model) for r in out.records)
    assert {m for (c, m) in by if c == "hi"} == {"lora-a"}
    assert {m for (c, m) in by if c == "lo"} <= {None, "lora-a", "lora-b"}  # the mix (None: the base model)
    pc = out.result["classes"]["per_class"]
    assert pc["hi"]["completed"] + pc["lo"]["completed"] == 24
    assert pc["hi"]["completed"] == sum(v for (c, _), v in by.items() if c == "hi")


def test_missing_adapter_is_a_preflight_error(lora_server: VllmServer, tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--host",
        lora_server.url,
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "missing",
        "--quiet",
        "--no-report",
        "--model",
        f"{lora_server.model_name}:1,lora-c:1",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == PREFLIGHT, proc.stderr
    assert "'lora-c' is not served" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_priority_class_ttft_p99_lower_under_overload(lora_server: VllmServer, tmp_path: Path) -> None:
    out = run_vllm_locust(
        lora_server.url,
        tmp_path,
        "prio",
        "--model",
        lora_server.model_name,
        "--num-prompts",
        "60",
        "--users",
        "12",
        "--input-len",
        "32",
        "--output-len",
        "16",
        "--ignore-eos",
        "--class",
        "hi:weight=1,priority=0",
        "--class",
        "lo:weight=1,priority=10",
    )
    assert out.result["failed"] == 0
    ttft = {
        c: [r.chunk_times_us[0] for r in out.records if r.request_class == c and r.chunk_times_us]
        for c in ("hi", "lo")
    }
    assert min(len(v) for v in ttft.values()) >= 15, {c: len(v) for c, v in ttft.items()}
    pc = out.result["classes"]["per_class"]
    assert pc["hi"]["p99_ttft_ms"] < pc["lo"]["p99_ttft_ms"], (
        pc["hi"]["p99_ttft_ms"],
        pc["lo"]["p99_ttft_ms"],
    )
    assert np.median(ttft["hi"]) < np.median(ttft["lo"])
