"""Exact-length prompts are built off the event loop, ahead of their requests (a tokenizer never holds the loop).

Before: every `--tokenizer` prompt ran its 5-6 tokenizations on the worker's loop thread (a greenlet calling
ExactPrompts.get), holding every stream of the worker. Now AheadPrompts builds them on native threads; the
tests count the tokenizer's calls by OS thread (no timing), and check the prompts are byte for byte the old ones.
"""

from __future__ import annotations

import random
from typing import Any

import gevent
import pytest
from gevent import monkey

from vllm_users.options import build
from vllm_users.workload import prompt_ahead
from vllm_users.workload.prompt_ahead import AheadPrompts
from vllm_users.workload.prompts import LengthModel, random_words
from vllm_users.workload.source import ExactPrompts, TokenCounter, load_tokenizer, prompt_source

# the OS thread (threading's get_ident is a greenlet's when gevent patched it)
_ident = monkey.get_original("_thread", "get_ident")


class ThreadCountingTokenizer:
    """A fake tokenizer (3 characters a token within each word) that counts its calls on the loop's thread."""

    def __init__(self) -> None:
        self.loop_thread = _ident()
        self.on_loop = 0
        self.elsewhere = 0

    def __call__(self, text: str) -> int:
        if _ident() == self.loop_thread:
            self.on_loop += 1
        else:
            self.elsewhere += 1
        return sum((len(w) + 2) // 3 for w in text.split())


def _ask(src: Any, indices: list[list[int]]) -> dict[int, Any]:
    """Each inner list is one user's requests, asked from its own greenlet, in order, like a worker's users."""
    out: dict[int, Any] = {}

    def user(mine: list[int]) -> None:
        for i in mine:
            out[i] = src.get(i)
            gevent.sleep(0)  # the request's round trip

    gevent.joinall([gevent.spawn(user, m) for m in indices], raise_error=True)
    return out


def _users(n_users: int, per_user: int, stride: int = 1, first: int = 0) -> list[list[int]]:
    return [[first + (u + n_users * j) * stride for j in range(per_user)] for u in range(n_users)]


def test_in_line_builds_hold_the_loop_and_ahead_builds_do_not() -> None:
    # the fault: a greenlet building its prompt tokenizes on the loop's own thread, several times a request
    tk = ThreadCountingTokenizer()
    old = ExactPrompts(tk, 64, 8, 0.0, 3, True, LengthModel())
    asked = _users(8, 5)
    _ask(old, asked)
    assert tk.on_loop >= 40 and tk.elsewhere == 0  # >= 1 per request, all on the loop
    # the fix: the same source behind AheadPrompts tokenizes on build threads only
    tk2 = ThreadCountingTokenizer()
    src = AheadPrompts(ExactPrompts(tk2, 64, 8, 0.0, 3, True, LengthModel()), ahead=8, off_loop=True)
    _ask(src, asked)
    assert tk2.on_loop == 0
    assert tk2.elsewhere >= 40


def test_same_prompts_as_in_line_for_the_same_seed_and_every_stride() -> None:
    tk = ThreadCountingTokenizer()
    for stride, first in ((1, 0), (4, 2), (7, 5)):  # one worker, a worker's share of 4, an odd one
        src = AheadPrompts(ExactPrompts(tk, 48, 8, 0.3, 11, True, LengthModel()), ahead=6, off_loop=True)
        got = _ask(src, _users(5, 6, stride, first))
        ref = ExactPrompts(tk, 48, 8, 0.3, 11, True, LengthModel())
        assert got == {i: ref.get(i) for i in got}
        assert len(got) == 30
        # built ahead: the next indices of the stride, and never more than the bound of guesses
        assert set(src._slots) <= {max(got) + stride * k for k in range(1, 7)}
        assert len(src._slots) <= 4 * src.ahead


def test_out_of_order_and_jumping_indices_get_their_own_prompts() -> None:
    tk = ThreadCountingTokenizer()
    src = AheadPrompts(ExactPrompts(tk, 32, 8, 0.0, 1, False, LengthModel()), ahead=4, off_loop=True)
    ref = ExactPrompts(tk, 32, 8, 0.0, 1, False, LengthModel())
    order = [[0, 1, 2, 3, 100, 101, 50, 102, 7, 3000, 3001, 3002]]  # granted ranges jump between grants
    got = _ask(src, order)
    assert got == {i: ref.get(i) for i in order[0]}
    assert len(src._slots) <= 4 * src.ahead


def test_a_new_run_from_index_0_is_built_ahead_again() -> None:
    tk = ThreadCountingTokenizer()
    src = AheadPrompts(ExactPrompts(tk, 16, 4, 0.0, 2, True, LengthModel()), ahead=3, off_loop=True)
    _ask(src, [list(range(1000, 1010))])
    got = _ask(src, [[0, 1, 2]])  # the web UI's next test, the same options: its indices start over
    assert got == {i: ExactPrompts(tk, 16, 4, 0.0, 2, True, LengthModel()).get(i) for i in (0, 1, 2)}
    assert {3, 4, 5} <= set(src._slots)


def test_a_failing_build_raises_in_the_asking_greenlet() -> None:
    class Boom:
        def get(self, index: int) -> Any:
            raise ValueError(f"no prompt {index}")

    src = AheadPrompts(Boom(), ahead=2, off_loop=True)
    with pytest.raises(ValueError, match="no prompt 5"):
        gevent.spawn(src.get, 5).get()


def test_in_line_outside_a_gevent_worker() -> None:
    tk = ThreadCountingTokenizer()
    src = AheadPrompts(ExactPrompts(tk, 16, 4, 0.0, 0, True, LengthModel()), off_loop=False)
    src.get(0)
    src.get(1)
    assert tk.elsewhere == 0 and not src._slots  # nothing built ahead, nothing on a thread


def _tokenizer_dir(tmp_path: Any) -> str:
    tk = pytest.importorskip("tokenizers")
    t = tk.Tokenizer(tk.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    t.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [tk.pre_tokenizers.WhitespaceSplit(), tk.pre_tokenizers.Split(tk.Regex(".{1,3}"), "isolated")]
    )
    t.save(str(tmp_path / "tokenizer.json"))
    return str(tmp_path)


def test_the_counter_releases_the_gil_and_counts_as_encode(tmp_path: Any) -> None:
    tk = pytest.importorskip("tokenizers")
    path = _tokenizer_dir(tmp_path)
    count = load_tokenizer(path)
    assert isinstance(count, TokenCounter) and count.releases_gil
    old = tk.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))  # the old path: encode, one text
    for n in (1, 7, 64, 300):
        text = random_words(n, random.Random(n))
        assert count(text) == len(old.encode(text, add_special_tokens=False).ids)


def test_prompt_source_builds_ahead_in_a_worker_with_the_old_prompts(tmp_path: Any, monkeypatch: Any) -> None:
    tk = pytest.importorskip("tokenizers")
    path = _tokenizer_dir(tmp_path)
    o = build(tokenizer=path, input_len=40, output_len=4, seed=9)
    lm = LengthModel()
    monkeypatch.setattr(prompt_ahead, "off_loop_possible", lambda: True)  # as in a Locust worker
    sources = [prompt_source(o, lm) for _ in range(3)]  # three users of one worker: one source, shared
    assert all(s is sources[0] for s in sources) and isinstance(sources[0], AheadPrompts)
    got = _ask(sources[0], _users(3, 4))
    t = tk.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    old = ExactPrompts(lambda s: len(t.encode(s, add_special_tokens=False).ids), 40, 4, 0.0, 9, True, lm)
    assert got == {i: old.get(i) for i in got}  # byte for byte: the old counter, in line
    monkeypatch.setattr(prompt_ahead, "off_loop_possible", lambda: False)
    assert isinstance(prompt_source(o, LengthModel()), ExactPrompts)  # the preflight, a script: in line
