"""benchmarks/gpu/make_moe_model.py at a tiny size with the vLLM venv's torch and transformers: a Mixtral that
vLLM's loader takes (its checkpoint names w1/w2/w3 per expert, the router `gate`), the project's tokenizer."""

from __future__ import annotations

import json
import math
import struct
import subprocess
from pathlib import Path

from tests.e2e.vllm_env import VllmEnv

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "make_moe_model.py"


def _safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a .safetensors header (8-byte length, then JSON), without safetensors."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def test_tiny_mixtral_with_the_project_tokenizer(vllm_env: VllmEnv, tmp_path: Path) -> None:
    out = tmp_path / "moe"
    p = subprocess.run(
        [
            str(vllm_env.python),
            str(SCRIPT),
            str(out),
            "--layers",
            "2",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--experts",
            "4",
            "--topk",
            "2",
            "--intermediate",
            "96",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    done = json.loads((out / ".done").read_text())
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["MixtralForCausalLM"] and cfg["model_type"] == "mixtral"
    assert (cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["num_hidden_layers"]) == (4, 2, 2)
    assert cfg["vocab_size"] == done["vocab"] == 8192 and done["tokenizer_copied"] is False
    shapes = _safetensors_shapes(out / "model.safetensors")
    for layer in range(2):
        moe = f"model.layers.{layer}.block_sparse_moe"
        assert shapes[f"{moe}.gate.weight"] == [4, 64]
        for e in range(4):
            assert shapes[f"{moe}.experts.{e}.w1.weight"] == [96, 64]  # vLLM's Mixtral: ckpt_names w1, w2, w3
            assert shapes[f"{moe}.experts.{e}.w2.weight"] == [64, 96]
            assert shapes[f"{moe}.experts.{e}.w3.weight"] == [96, 64]
    assert done["params"] == sum(math.prod(s) for s in shapes.values())
    tok = json.loads((out / "tokenizer_config.json").read_text())
    assert tok["model_max_length"] == 4096 and (out / "tokenizer.json").exists()
    # a second build copies that tokenizer instead of training it again
    again = tmp_path / "moe2"
    p = subprocess.run(
        [
            str(vllm_env.python),
            str(SCRIPT),
            str(again),
            "--tokenizer-from",
            str(out),
            "--layers",
            "1",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--intermediate",
            "96",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((again / ".done").read_text())["tokenizer_copied"] is True
    assert (again / "tokenizer.json").read_bytes() == (out / "tokenizer.json").read_bytes()
