"""--spec-tokens K --spec-acceptance P: each decode step emits 1 + the accepted drafts in one chunk, and vLLM's
spec_decode counters count them."""

from __future__ import annotations

import math
import threading

import pytest

from vllm_sim import probe
from vllm_sim.config import parse_config
from vllm_sim.launch import start_simulator

FAST = ["--decode-step-ms", "0.5", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "1000000"]


def _counter(text: str, name: str) -> list[float]:
    """Every sample of a counter (one per label set, in page order)."""
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]


def _streams(url: str, n: int, tokens: int) -> list[probe.ProbeResult]:
    out: list[probe.ProbeResult] = []
    body = {
        "prompt": "a b c",
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    def one() -> None:
        out.append(probe.request(url, "/v1/completions", body, timeout=30))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert len(out) == n and all(r.status == 200 and r.complete for r in out)
    return out


def _run(
    k: int, p: float, n: int = 8, tokens: int = 300
) -> tuple[dict[str, list[float]], list[list[int]], int]:
    """(counters, tokens per content chunk of each stream, generation tokens)."""
    with start_simulator(["--spec-tokens", str(k), "--spec-acceptance", str(p), *FAST]) as sim:
        results = _streams(sim.url, n, tokens)
        page = probe.request(sim.url, "/metrics").body.decode()
        assert "Traceback" not in sim.stderr_text()
    names = ("drafts", "draft_tokens", "accepted_tokens", "accepted_tokens_per_pos")
    counters = {nm: _counter(page, f"vllm:spec_decode_num_{nm}_total") for nm in names}
    chunks = []
    for r in results:
        data = [d for d in r.data() if d != "[DONE]" and d["choices"]]
        assert sum(1 for d in data) >= 1
        # the simulator's words are one token each: a chunk's tokens are its words
        chunks.append([len(d["choices"][0]["text"].split()) for d in data])
        assert r.data()[-2]["usage"]["completion_tokens"] == tokens
    return counters, chunks, int(_counter(page, "vllm:generation_tokens_total")[0])


def test_mean_accepted_length_is_its_expectation_and_the_counters_agree() -> None:
    k, p, n, tokens = 3, 0.6, 8, 300
    c, chunks, generated = _run(k, p, n, tokens)
    drafts, draft_tokens, accepted = c["drafts"][0], c["draft_tokens"][0], c["accepted_tokens"][0]
    per_pos = c["accepted_tokens_per_pos"]
    assert len(per_pos) == k and draft_tokens == k * drafts and sum(per_pos) == accepted
    assert all(
        a >= b for a, b in zip(per_pos, per_pos[1:], strict=False)
    )  # a run stops at its first rejection
    # accepted per draft: leading successes of K Bernoulli(P); mean sum P^i, variance from E[A^2] = sum (2i-1) P^i
    mean = sum(p**i for i in range(1, k + 1))
    var = sum((2 * i - 1) * p**i for i in range(1, k + 1)) - mean**2
    assert drafts > 800
    assert abs(accepted / drafts - mean) < 4 * math.sqrt(var / drafts), (accepted / drafts, mean)
    for i, got in enumerate(per_pos):  # position i is accepted with probability P^(i+1)
        q = p ** (i + 1)
        assert abs(got / drafts - q) < 4 * math.sqrt(q * (1 - q) / drafts)
    # every decode step is one chunk of 1 + accepted tokens; a stream's first token (its prefill's) has no draft
    assert sum(len(ch) for ch in chunks) == n + drafts
    assert generated == n * tokens
    assert n + drafts + accepted - n * k <= generated <= n + drafts + accepted  # the last step may overshoot
    assert max(max(ch) for ch in chunks) == k + 1 and min(min(ch) for ch in chunks) == 1


def test_certain_acceptance_sends_k_plus_one_tokens_a_chunk() -> None:
    _, chunks, _ = _run(4, 1.0, n=2, tokens=41)
    for ch in chunks:
        assert ch == [1] + [5] * 8  # the first token, then 8 steps of 5


def test_spec_flags_default_off_and_checked() -> None:
    cfg = parse_config(["--spec-tokens", "2", "--spec-acceptance", "0.5"])
    assert (cfg.spec_tokens, cfg.spec_acceptance) == (2, 0.5)
    assert parse_config([]).spec_tokens == 0
    for bad in (["--spec-tokens", "-1"], ["--spec-acceptance", "1.5"], ["--spec-tokens", "2", "--fixed"]):
        with pytest.raises(SystemExit):
            parse_config(bad)
    with start_simulator(FAST) as sim:  # off: no spec_decode counter at all (a count that does not apply)
        _streams(sim.url, 1, 5)
        assert "spec_decode" not in probe.request(sim.url, "/metrics").body.decode()
