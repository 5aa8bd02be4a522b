"""--tokenizer is loaded once per process: every user builds its prompt source, and loading a
real tokenizer.json holds the event loop 10-40 ms; 128 users a worker blocked it for seconds at the start."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_users.options import build
from vllm_users.workload.prompts import LengthModel
from vllm_users.workload.source import ExactPrompts, prompt_source


def test_users_share_one_loaded_tokenizer(tmp_path: Any, monkeypatch: Any) -> None:
    tk = pytest.importorskip("tokenizers")
    t = tk.Tokenizer(tk.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    t.pre_tokenizer = tk.pre_tokenizers.WhitespaceSplit()
    t.save(str(tmp_path / "tokenizer.json"))
    loads: list[str] = []
    real = tk.Tokenizer.from_file

    def counted(f: str) -> Any:
        loads.append(f)
        return real(f)

    monkeypatch.setattr(tk.Tokenizer, "from_file", staticmethod(counted))
    o = build(tokenizer=str(tmp_path), input_len=16, output_len=4)
    lm = LengthModel()
    sources = [prompt_source(o, lm) for _ in range(5)]  # five users of one worker
    # in line, or behind the shared AheadPrompts in a gevent worker (vllm_users/workload/prompt_ahead.py)
    assert all(isinstance(getattr(s, "base", s), ExactPrompts) for s in sources)
    assert len(loads) == 1
    assert sources[0].get(3) == sources[4].get(3)
