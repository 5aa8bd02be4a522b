"""Prompt-length calibration at the edges: bounded in probes and seconds, rejected when the
server's counts do not grow with the text, handed on as a table, and never inflating a prompt past the word bound."""

from __future__ import annotations

import json
import random
from typing import Any

from vllm_users.workload.calibration import Budget, calibrate_lengths
from vllm_users.workload.prompts import MAX_TOKENS_PER_WORD, MIN_TOKENS_PER_WORD, LengthModel

TEMPLATE = 8


def _usage_server(prompt_tokens: Any, calls: list[str] | None = None, on_call: Any = None):  # type: ignore[no-untyped-def]
    """A server without /tokenize whose usage.prompt_tokens is `prompt_tokens(text)`."""

    def post(path: str, body: dict[str, Any]) -> tuple[int, bytes] | None:
        if calls is not None:
            calls.append(path)
        if on_call is not None:
            on_call()
        if path == "/tokenize":
            return 404, b'{"detail": "Not Found"}'
        text = body["messages"][0]["content"] if "messages" in body else body["prompt"]
        usage = {"prompt_tokens": prompt_tokens(text), "completion_tokens": 1}
        return 200, json.dumps({"choices": [{"text": "x"}], "usage": usage}).encode()

    return post


def test_usage_that_does_not_grow_with_the_prompt_is_rejected_for_words() -> None:
    """A server reporting prompt_tokens 32 for every prompt made the ratio 1/400: 12,800 words for 32 tokens."""
    lm = calibrate_lengths(_usage_server(lambda _text: 32), "m", True)
    assert lm.source.startswith("words (rejected: "), lm.source
    assert not lm.exact and lm.tokens_per_word == 1.0 and lm.overhead is None
    assert lm.warning is not None and "does not grow" in lm.warning
    assert len(lm.text(32, random.Random(0)).split(" ")) == 32


def test_a_tokenize_count_that_does_not_grow_is_rejected_too() -> None:
    def post(path: str, body: dict[str, Any]) -> tuple[int, bytes] | None:
        return (200, b'{"count": 150, "tokens": []}') if path == "/tokenize" else (404, b"{}")

    lm = calibrate_lengths(post, "m", False)
    assert lm.source.startswith("words (rejected: tokenize:vllm"), lm.source
    assert lm.tokens_per_word == 1.0 and lm.warning


def test_a_ratio_out_of_sane_bounds_is_rejected() -> None:
    lm = calibrate_lengths(_usage_server(lambda text: TEMPLATE + 40 * len(text.split(" "))), "m", True)
    assert lm.source.startswith("words (rejected: "), (
        lm.source
    )  # 40 tokens a word: no tokenizer splits so finely
    assert f"{MIN_TOKENS_PER_WORD:g}-{MAX_TOKENS_PER_WORD:g}" in (lm.warning or "")


def test_a_sane_usage_server_still_calibrates_exactly() -> None:
    lm = calibrate_lengths(_usage_server(lambda text: TEMPLATE + len(text.split(" "))), "m", True)
    assert lm.exact and lm.source == "usage" and lm.overhead == TEMPLATE and lm.warning is None


def test_calibration_is_bounded_in_probes() -> None:
    calls: list[str] = []
    budget = Budget(requests=20)
    lm = calibrate_lengths(
        _usage_server(lambda text: TEMPLATE + len(text.split(" ")), calls), "m", True, budget=budget
    )
    assert len(calls) <= 20
    assert lm.source == "usage (ratio)" and lm.tokens_per_word == 1.0  # the table did not fit: the ratio did
    assert budget.report()["requests"] == len(calls)


def test_slow_probes_give_the_ratio_within_the_seconds() -> None:
    """A server that ignores max_tokens answers each probe in full (64 tokens at 10 ms): the word table (~160
    probes) does not fit in the bound, so the ratio (a dozen probes) is what calibration gives."""
    now = [0.0]

    def tick() -> None:
        now[0] += 0.65

    calls: list[str] = []
    budget = Budget(seconds=10.0, concurrency=8, clock=lambda: now[0])
    lm = calibrate_lengths(
        _usage_server(lambda text: TEMPLATE + len(text.split(" ")), calls, tick), "m", True, budget=budget
    )
    assert lm.source == "usage (ratio)" and lm.overhead == TEMPLATE
    assert len(calls) < 20 and now[0] < 10.0
    assert budget.report()["seconds"] < 10.0


def test_calibration_stops_at_its_deadline() -> None:
    now = [0.0]

    def tick() -> None:
        now[0] += 4.0

    budget = Budget(seconds=10.0, clock=lambda: now[0])
    lm = calibrate_lengths(
        _usage_server(lambda text: TEMPLATE + len(text.split(" ")), None, tick), "m", True, budget=budget
    )
    assert budget.report()["cut"] and now[0] <= 12.0
    assert not lm.exact and lm.warning and "cut off" in lm.warning


def test_each_probe_waits_at_most_its_share_of_the_time() -> None:
    now = [0.0]
    budget = Budget(seconds=10.0, probe_s=5.0, clock=lambda: now[0])
    assert budget.timeout() == 5.0
    now[0] = 8.0
    assert budget.timeout() == 2.0


def test_prompts_never_inflate_past_the_word_bound() -> None:
    assert LengthModel(tokens_per_word=1 / 400).words_for(32) == 32 * 4  # not 12,800 words
    assert LengthModel(tokens_per_word=1000.0).words_for(32) >= 32 // 10
    assert len(LengthModel(tokens_per_word=1 / 400).text(32, random.Random(1)).split(" ")) == 128


def test_the_table_travels_as_json() -> None:
    lm = calibrate_lengths(_usage_server(lambda text: TEMPLATE + len(text.split(" "))), "m", True)
    back = LengthModel.from_table(json.loads(json.dumps(lm.to_table())))
    assert back.exact and back.source == lm.source and back.overhead == lm.overhead
    assert back.first == lm.first and back.after_space == lm.after_space
    assert back.text(100, random.Random(5)) == lm.text(100, random.Random(5))
    rejected = calibrate_lengths(_usage_server(lambda _t: 32), "m", True)
    again = LengthModel.from_table(json.loads(json.dumps(rejected.to_table())))
    assert again.warning == rejected.warning and again.source == rejected.source
