"""Write a random-weight Llama GGUF for llama-server, with llama.cpp's own SPM vocabulary (no download).

    PYTHONPATH=LLAMA_CPP/gguf-py python benchmarks/gpu/make_random_llama_gguf.py \
        --vocab LLAMA_CPP/models/ggml-vocab-llama-spm.gguf --out /tmp/random-llama.gguf [--layers 22 --hidden 2048]

Default shape: TinyLlama-1.1B's (22 layers, hidden 2048, 32 heads, 4 KV heads, FFN 5632), f16 weights,
N(0, 0.02) (seeded): generation is random text, which is all a load test needs.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, LlamaFileType


def main(argv: list[str] | None = None) -> int:
    """Read the vocabulary, draw the weights, write the GGUF."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--ctx", type=int, default=4096)
    a = ap.parse_args(argv)
    vocab = GGUFReader(a.vocab)
    tokens = vocab.fields["tokenizer.ggml.tokens"].contents()
    scores = vocab.fields["tokenizer.ggml.scores"].contents()
    types = vocab.fields["tokenizer.ggml.token_type"].contents()
    n_vocab, h, hd = len(tokens), a.hidden, a.hidden // a.heads
    w = GGUFWriter(a.out, "llama")
    w.add_name("random-llama")
    w.add_context_length(a.ctx)
    w.add_embedding_length(h)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    rng = np.random.default_rng(0)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    ones = np.ones(h, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(n_vocab, h))
    for i in range(a.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", mat(a.heads * hd, h))
        w.add_tensor(p + "attn_k.weight", mat(a.kv_heads * hd, h))
        w.add_tensor(p + "attn_v.weight", mat(a.kv_heads * hd, h))
        w.add_tensor(p + "attn_output.weight", mat(h, a.heads * hd))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", mat(a.ffn, h))
        w.add_tensor(p + "ffn_up.weight", mat(a.ffn, h))
        w.add_tensor(p + "ffn_down.weight", mat(h, a.ffn))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", mat(n_vocab, h))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: {a.layers} layers, hidden {h}, vocab {n_vocab}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
