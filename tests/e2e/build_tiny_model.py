"""Build the tiny random-weight Llama used by the e2e tier. Nothing is downloaded.

    python build_tiny_model.py OUT_DIR

Run with the e2e vLLM venv's python (it has torch, transformers, tokenizers, safetensors); called by
setup_vllm.sh. The result is deterministic for a given Python stdlib and library versions:

- tokenizer: byte-level BPE (vocab 8192) trained on this interpreter's own stdlib sources, wrapped as
  ``PreTrainedTokenizerFast`` with a ChatML/Hermes chat template that renders ``tools``, assistant
  ``tool_calls`` and ``tool`` messages; ``<tool_call>``/``</tool_call>`` are added tokens so vLLM's
  ``hermes`` tool parser finds them; a ``<|begin_of_text|>`` bos is prepended to plain-text prompts.
- model: ``LlamaForCausalLM``, 2 layers, hidden 256, 4 heads (head_dim 64), random weights (seed 0),
  bfloat16, saved as safetensors.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

VOCAB_SIZE = 8192
TRAIN_BYTES = 4_000_000  # of stdlib source text; ~10 s of BPE training on one core

BOS = "<|begin_of_text|>"
EOS = "<|im_end|>"
PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
SPECIAL = [BOS, PAD, IM_START, EOS]
# Not "special" (so skip_special_tokens keeps them in the text, like Qwen2.5/Hermes models).
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

# ChatML with Hermes-style tools, modelled on the Qwen2.5 template.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' or (message['role'] == 'system' and not loop.first)"
    " or (message['role'] == 'assistant' and not message.get('tool_calls')) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for tool_call in message['tool_calls'] %}"
    "{%- if tool_call['function'] is defined %}{%- set tool_call = tool_call['function'] %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + tool_call['name'] + '\", \"arguments\": ' }}"
    "{%- if tool_call['arguments'] is string %}{{- tool_call['arguments'] }}"
    "{%- else %}{{- tool_call['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def training_text() -> list[str]:
    """Deterministic corpus: the stdlib's .py files in sorted order, up to TRAIN_BYTES."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    total = 0
    for p in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        if "site-packages" in p.parts or "test" in p.parts:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(text)
        total += len(text)
        if total >= TRAIN_BYTES:
            break
    # Some prose and non-ASCII so that chat prompts and multi-byte characters tokenize sensibly.
    out.append(
        "The quick brown fox jumps over the lazy dog. Hello, how are you today? "
        "Écrivez une histoire. Straße, café, naïve, 東京, привет, 😀 🚀 ✓ — “quotes” … "
    )
    return out


def build_tokenizer(out_dir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(ADDED),
        min_frequency=2,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=None,
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(ADDED, special_tokens=False)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


def build_model(out_dir: Path, tokenizer) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(str(out_dir))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out_dir)
    build_model(out_dir, tokenizer)
    # Sanity: the template renders chat and tools, and the tool tags are single tokens.
    msgs = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    tokenizer.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
    for t in ("<tool_call>", "</tool_call>"):
        assert len(tokenizer.encode(t, add_special_tokens=False)) == 1, t
    info = {
        "vocab_size": len(tokenizer),
        "bos": BOS,
        "eos": EOS,
        "files": sorted(p.name for p in out_dir.iterdir()),
    }
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
