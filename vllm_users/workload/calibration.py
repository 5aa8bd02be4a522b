"""Calibrate prompt lengths against the server under test: how does it count our words?

In order: its /tokenize in vLLM's shape (SGLang's is the same), in llama.cpp's shape, and last the one thing
every OpenAI-compatible server returns, `usage.prompt_tokens` of probe requests with `max_tokens: 1` on the
run's own endpoint. Each source also tells, where it can, how many tokens the server adds around a prompt
(BOS, chat template): the result compares the actual prompt tokens, less those, with `--input-len`.

Calibration is bounded (`Budget`): at most MAX_PROBES requests and MAX_SECONDS in all, each probe at most
PROBE_TIMEOUT_S; the word table is only asked for when it fits what is left (a server that ignores max_tokens
answers every usage probe in full: then the ratio is all it gets). `vllm-locust run` calibrates once, in its
preflight, and hands the table to the workers (the `vllm_lengths` option).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from vllm_users.workload.prompts import TOKENIZE_SHAPES, LengthModel, probe_counter, tokenize_count

__all__ = ["MAX_PROBES", "MAX_SECONDS", "PROBE_TIMEOUT_S", "Budget", "Mapper", "Post", "calibrate_lengths"]

# post(path, body) -> (HTTP status, body bytes), or None when the request failed
Post = Callable[[str, dict[str, Any]], "tuple[int, bytes] | None"]
Mapper = Callable[[Callable[[str], "int | None"], Iterable[str]], Iterable["int | None"]]

MAX_PROBES = 200  # the full word table takes ~175 (the sources' detection included)
MAX_SECONDS = 10.0  # the whole calibration; /tokenize on a remote server needs ~2 s of it at 8 in flight
PROBE_TIMEOUT_S = (
    5.0  # one probe: a server still answering after this is cut off (the probe counts as failed)
)
CONCURRENCY = 8  # probes in flight (the callers' pools)


class Budget:
    """The bounds of one calibration: `requests` probes, `seconds` in all, `probe_s` each (`timeout()`: what the
    next probe may take); `concurrency` probes in flight. Thread- and greenlet-safe enough: counts only grow."""

    def __init__(
        self,
        requests: int = MAX_PROBES,
        seconds: float = MAX_SECONDS,
        probe_s: float = PROBE_TIMEOUT_S,
        concurrency: int = CONCURRENCY,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.requests, self.seconds, self.probe_s = requests, seconds, probe_s
        self.concurrency = max(1, concurrency)
        self.clock = clock
        self.t0 = clock()
        self.sent = 0
        self.by_path: dict[str, int] = {}
        self.busy_s = 0.0  # summed probe latencies (their mean predicts what more probes cost)
        self.cut: str | None = None  # why probes were refused (None: never)
        self._lock = threading.Lock()

    def left(self) -> float:
        """Seconds left of the calibration."""
        return self.seconds - (self.clock() - self.t0)

    def timeout(self) -> float:
        """What the next probe may take at most."""
        return max(0.001, min(self.probe_s, self.left()))

    def take(self, path: str) -> bool:
        """Count one more probe to `path`; False (and `cut` says why) when the bounds are reached."""
        with self._lock:
            if self.sent >= self.requests:
                self.cut = self.cut or f"{self.requests} probes"
                return False
            if self.left() <= 0:
                self.cut = self.cut or f"{self.seconds:g} s"
                return False
            self.sent += 1
            self.by_path[path] = self.by_path.get(path, 0) + 1
            return True

    def done(self, took_s: float) -> None:
        """A probe came back after `took_s`."""
        with self._lock:
            self.busy_s += took_s

    def affords(self, n: int) -> bool:
        """Whether `n` more probes fit in what is left (their count, and their time at the mean latency)."""
        if self.sent + n > self.requests:
            return False
        mean = self.busy_s / self.sent if self.sent else 0.0
        return mean * math.ceil(n / self.concurrency) <= self.left()

    def report(self) -> dict[str, Any]:
        """What calibrating cost: requests (and by path), seconds, and what cut it short (None: nothing)."""
        return {
            "requests": self.sent,
            "requests_by_path": dict(self.by_path),
            "seconds": round(self.clock() - self.t0, 3),
            "cut": self.cut,
        }


def _bounded(post: Post, budget: Budget) -> Post:
    """`post` within `budget`: a probe past its bounds is not sent (it fails, as an unreachable server's would)."""

    def bounded(path: str, body: dict[str, Any]) -> tuple[int, bytes] | None:
        if not budget.take(path):
            return None
        t = budget.clock()
        try:
            return post(path, body)
        finally:
            budget.done(budget.clock() - t)

    return bounded


def _memo(count: Callable[[str], int | None]) -> Callable[[str], int | None]:
    """`count` that asks the server once per text (the usage source's first words are counted twice)."""
    seen: dict[str, int | None] = {}

    def counted(text: str) -> int | None:
        if text not in seen:
            seen[text] = count(text)
        return seen[text]

    return counted


def _answer(post: Post, path: str, body: dict[str, Any]) -> Any:
    got = post(path, body)
    if got is None or got[0] != 200:
        return None
    try:
        return json.loads(got[1])
    except ValueError:
        return None


def _tokenize_counter(post: Post, model: str) -> tuple[str, Callable[[str], int | None]] | None:
    """The first /tokenize shape the server answers, as a counter of a text's own tokens."""
    for name, body_of in TOKENIZE_SHAPES:

        def count(text: str, body_of: Callable[[str, str], dict[str, Any]] = body_of) -> int | None:
            got = post("/tokenize", body_of(model, text))
            return tokenize_count(got[1]) if got is not None and got[0] == 200 else None

        n = count("a b")
        if n is not None and n >= 1:
            return name, count
    return None


def _usage_counter(post: Post, model: str, chat: bool) -> Callable[[str], int | None]:
    """usage.prompt_tokens of a one-token request carrying `text` on the run's endpoint."""
    path = "/v1/chat/completions" if chat else "/v1/completions"

    def prompt_tokens(text: str) -> int | None:
        body: dict[str, Any] = {"model": model, "max_tokens": 1, "stream": False}
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        doc = _answer(post, path, body)
        usage = doc.get("usage") if isinstance(doc, dict) else None
        n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return n if isinstance(n, int) else None

    return prompt_tokens


def _tokenize_overhead(post: Post, model: str, shape: str, chat: bool, own: int) -> int | None:
    """Tokens a request adds around the text "a" (`own` tokens alone), by /tokenize where it can tell."""
    if shape == "vllm":
        body: dict[str, Any] = {"model": model}
        if chat:  # the chat template, as the server applies it to one user message
            body.update(messages=[{"role": "user", "content": "a"}], add_generation_prompt=True)
        else:
            body.update(prompt="a", add_special_tokens=True)
    elif not chat:  # llama.cpp: with its special tokens (BOS); its chat template is not exposed here
        body = {"content": "a", "add_special": True}
    else:
        return None
    got = post("/tokenize", body)
    n = tokenize_count(got[1]) if got is not None and got[0] == 200 else None
    return n - own if n is not None and n >= own else None


def calibrate_lengths(
    post: Post, model: str, chat: bool, map_: Mapper = map, budget: Budget | None = None
) -> LengthModel:
    """A LengthModel for this server (`source` says how it was calibrated, `overhead` its own tokens, `probes`
    what it cost), within `budget` (default: MAX_PROBES, MAX_SECONDS)."""
    budget = budget or Budget()
    lm = _calibrate(_bounded(post, budget), model, chat, map_, budget)
    lm.probes = budget.report()
    if budget.cut and lm.warning is None:
        lm.warning = (
            f"prompt-length calibration cut off at {budget.cut} (source {lm.source}): prompt lengths may "
            "be less exact"
        )
    return lm


def _calibrate(post: Post, model: str, chat: bool, map_: Mapper, budget: Budget) -> LengthModel:
    found = _tokenize_counter(post, model)
    if found is not None:
        shape, count = found
        count = _memo(count)
        lm = LengthModel.from_counter(count, map_, source=f"tokenize:{shape}", affords=budget.affords)
        own = count("a")
        if own is not None and lm.warning is None:
            lm.overhead = _tokenize_overhead(post, model, shape, chat, own)
            if (
                lm.overhead is None
            ):  # /tokenize cannot tell (llama.cpp's chat template): one probe request can
                probed = _usage_counter(post, model, chat)("a")
                lm.overhead = probed - own if probed is not None and probed >= own else None
        return lm
    probe = probe_counter(_memo(_usage_counter(post, model, chat)), map_)
    if probe is None:
        return LengthModel(source="none")
    count, overhead = probe
    lm = LengthModel.from_counter(count, map_, source="usage", affords=budget.affords)
    if lm.warning is None:  # a rejected calibration's overhead is as wrong as its counts
        lm.overhead = overhead
    return lm
