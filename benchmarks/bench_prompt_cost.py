"""CPU per exact-length prompt (`--tokenizer`): the learnt word counts against counting every cut, interleaved.

    python benchmarks/bench_prompt_cost.py [--tokenizer DIR] [--lengths 128,1024] [--rounds 5] [--n 40]

A worker builds every prompt of an exact token length; on the GPU machine that was ~60 % of a busy worker's CPU
(docs/benchmarks.md). Each round times --n prompts of each length both ways, in turn (the word table warm: a
worker learns the vocabulary over its first prompts), with `time.process_time`. The tokenizer: --tokenizer, else
the e2e tiny model's (a byte-level BPE of 8,192 tokens, tests/e2e/build_tiny_model.py) where it is cached, else one
trained here the same way.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import print_table, write_json  # noqa: E402
from vllm_users.workload.prompts import VOCAB, LengthModel  # noqa: E402
from vllm_users.workload.source import ExactPrompts, load_tokenizer  # noqa: E402
from vllm_users.workload.word_costs import word_costs  # noqa: E402

CACHED = Path.home() / ".cache" / "vllm-locust" / "models" / "tiny-llama"


def _tokenizer(path: str | None) -> tuple[str, Callable[[str], int]]:
    if path:
        return path, load_tokenizer(path)
    if (CACHED / "tokenizer.json").exists():
        return str(CACHED), load_tokenizer(str(CACHED))
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=8192,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    stdlib = Path(random.__file__).parent
    tok.train_from_iterator(
        [p.read_text(errors="replace") for p in sorted(stdlib.glob("*.py"))[:200]], trainer
    )
    out = Path(tempfile.mkdtemp())
    tok.save(str(out / "tokenizer.json"))
    return "byte-level BPE 8192 trained on the stdlib", load_tokenizer(str(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--lengths", default="128,1024")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=40, help="prompts per length, way and round")
    a = ap.parse_args()
    name, count = _tokenizer(a.tokenizer)
    src = ExactPrompts(count, 100, 16, 0.0, 0, False, LengthModel())
    table = word_costs(count)
    for w in VOCAB:
        table.first(w), table.later(w)
    table.pad_cost()
    slow = src._fit_by_word_costs
    ways = {"counting": lambda words, tokens: None, "word table": slow}
    times: dict[tuple[int, str], list[float]] = {}
    seed = 0
    for _ in range(a.rounds):
        for tokens in map(int, a.lengths.split(",")):
            for way, fn in ways.items():
                src._fit_by_word_costs = fn  # type: ignore[method-assign]
                t0 = time.process_time()
                for _ in range(a.n):
                    seed += 1
                    text = src.fit(tokens, random.Random(seed))
                times.setdefault((tokens, way), []).append((time.process_time() - t0) / a.n)
                assert count(text) == tokens, (way, tokens)
    rows = []
    for tokens in map(int, a.lengths.split(",")):
        base = statistics.median(times[(tokens, "counting")])
        for way in ways:
            ms = statistics.median(times[(tokens, way)]) * 1e3
            rows.append(
                {
                    "tokens": tokens,
                    "way": way,
                    "cpu_ms_per_prompt": round(ms, 3),
                    "x": round(base * 1e3 / ms, 2),
                }
            )
    print_table(rows, ["tokens", "way", "cpu_ms_per_prompt", "x"], f"CPU per exact-length prompt ({name})")
    print(f"table checks {table.checked}, missed {table.missed}")
    print(
        f"wrote {write_json('prompt_cost', {'tokenizer': name, 'rounds': a.rounds, 'n': a.n, 'rows': rows})}"
    )


if __name__ == "__main__":
    main()
