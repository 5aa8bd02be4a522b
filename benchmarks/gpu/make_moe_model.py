"""A random Mixtral-like MoE model with the project's tokenizer, for real vLLM on a GPU. Nothing is downloaded.

    python3 benchmarks/gpu/make_moe_model.py OUT_DIR [--tokenizer-from DIR] [--layers 8] [--hidden 1024]
        [--experts 8] [--topk 2] [--intermediate N] [--seed 0] [--device auto|cpu|cuda]

MixtralForCausalLM: 8 experts, top-2 routing, 8 layers, hidden 1024, 16 heads, 8 KV heads (head_dim 64),
intermediate 2816 per expert, random weights (seed 0), bf16, saved with safetensors (about 0.6 B parameters,
1.2 GB). The tokenizer is the project's (tests/e2e/build_tiny_model.py's build_tokenizer: byte-level BPE, vocab
8192, ChatML template); `--tokenizer-from DIR` copies one already built (the device recipe's /tmp/model) instead
of training it again. Writes OUT_DIR/.done (JSON: parameters, shape, timings) last, so a reader can wait on it.
Uses only torch and transformers (MixtralConfig); runs on the CPU too, at a tiny size, for a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD_TINY = HERE.parent.parent / "tests" / "e2e" / "build_tiny_model.py"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description="random Mixtral-like MoE model with the project's tokenizer")
    p.add_argument("out", type=Path)
    p.add_argument(
        "--tokenizer-from", type=Path, default=None, help="copy this built tokenizer instead of training"
    )
    p.add_argument("--build-tiny-model", type=Path, default=BUILD_TINY, help="path of build_tiny_model.py")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=None, help="per expert; default hidden x 11/4")
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    a = p.parse_args(argv)
    if a.topk > a.experts or a.topk < 1:
        p.error(f"--topk {a.topk}: expected 1..--experts ({a.experts})")
    if a.hidden % a.heads or a.heads % a.kv_heads:
        p.error(
            f"--hidden {a.hidden} / --heads {a.heads} / --kv-heads {a.kv_heads}: heads must divide evenly"
        )
    return a


def tokenizer(a: argparse.Namespace) -> tuple[Any, bool]:
    """The project's tokenizer, saved into a.out: copied from --tokenizer-from (True), else trained by
    build_tokenizer (False)."""
    from transformers import AutoTokenizer

    if a.tokenizer_from is not None and (a.tokenizer_from / "tokenizer.json").exists():
        for name in TOKENIZER_FILES:
            if (a.tokenizer_from / name).exists():
                shutil.copy(a.tokenizer_from / name, a.out / name)
        return AutoTokenizer.from_pretrained(str(a.out)), True
    spec = importlib.util.spec_from_file_location("build_tiny_model", a.build_tiny_model)
    if spec is None or spec.loader is None:
        raise SystemExit(f"make_moe_model: cannot load {a.build_tiny_model}")
    btm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(btm)
    return btm.build_tokenizer(a.out), False


def build(a: argparse.Namespace) -> dict[str, Any]:
    """Make, save and describe the model; returns what .done holds."""
    t0 = time.time()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / ".done").unlink(missing_ok=True)
    tok, copied = tokenizer(a)
    t1 = time.time()

    import torch
    from transformers import GenerationConfig, MixtralConfig, MixtralForCausalLM

    torch.manual_seed(a.seed)
    cfg = MixtralConfig(
        vocab_size=len(tok),
        hidden_size=a.hidden,
        intermediate_size=a.intermediate or a.hidden * 11 // 4,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.hidden // a.heads,
        max_position_embeddings=a.max_len,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        num_local_experts=a.experts,
        num_experts_per_tok=a.topk,
        sliding_window=None,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    with torch.device(dev):
        model = MixtralForCausalLM(cfg).to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(str(a.out), safe_serialization=True)
    GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    ).save_pretrained(str(a.out))
    tc = a.out / "tokenizer_config.json"  # build_tokenizer says 2048; the model takes --max-len
    d = json.loads(tc.read_text())
    d["model_max_length"] = a.max_len
    tc.write_text(json.dumps(d, indent=2))
    info = {
        "architecture": "MixtralForCausalLM",
        "params": sum(p.numel() for p in model.parameters()),
        "layers": a.layers,
        "hidden": a.hidden,
        "experts": a.experts,
        "topk": a.topk,
        "intermediate": cfg.intermediate_size,
        "vocab": len(tok),
        "dtype": "bfloat16",
        "device": dev,
        "seed": a.seed,
        "tokenizer_copied": copied,
        "tok_s": round(t1 - t0, 1),
        "model_s": round(time.time() - t1, 1),
        "files": sorted(p.name for p in a.out.iterdir()),
    }
    (a.out / ".done").write_text(json.dumps(info))
    return info


def main(argv: list[str] | None = None) -> int:
    """Build the model; prints .done's JSON."""
    info = build(parse_args(sys.argv[1:] if argv is None else argv))
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
