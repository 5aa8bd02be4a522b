"""Loads to compare a twin with its server: closed-loop concurrency, an open-loop (Poisson) rate, and a longer
prompt, each sent by the probe's client, summarised as median TTFT, median TPOT and output tokens/s.

The same load, seeded the same, goes to both servers (tests/integration/twin/ and tests/e2e/test_twin_real_vllm.py
use it); none of these loads is one the probe used.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from orchestration.twin.probe import Budget, Probe, Shot

__all__ = ["Load", "compare", "run_load"]


@dataclass(frozen=True)
class Load:
    """One load: `concurrency` streams in closed loop, or (rate > 0) Poisson arrivals at `rate` per second."""

    name: str
    requests: int
    prompt_tokens: int
    output_tokens: int
    concurrency: int = 1
    rate: float = 0.0
    seed: int = 1
    # each request's output length drawn (seeded) from output_tokens × [1 - spread, 1 + spread]: closed-loop users
    # with equal lengths finish in the same step and come back as one wave, whose median TTFT jumps by a whole
    # prefill step when a constant moves by 2 ms (measured: 282 → 207 ms for an overhead of 10 → 12 ms)
    output_spread: float = 0.0


def run_load(
    host: str, model: str, load: Load, timeout_s: float = 120.0, tokens_per_word: float = 1.0
) -> dict[str, Any]:
    """Send `load` to `host`; its medians (ms), output tok/s and failures."""
    probe = Probe(host, model, Budget(timeout_s), seed=load.seed, tokens_per_word=tokens_per_word)
    prompts = [probe.prompt(load.prompt_tokens) for _ in range(load.requests)]
    lengths = random.Random(load.seed + 1)
    outputs = [
        max(
            2, round(load.output_tokens * lengths.uniform(1.0 - load.output_spread, 1.0 + load.output_spread))
        )
        for _ in range(load.requests)
    ]
    shots: list[Shot] = []
    lock = threading.Lock()
    t0 = time.perf_counter()

    def send(i: int) -> None:
        s = probe.shot(prompts[i][0], outputs[i], prompts[i][1])
        with lock:
            shots.append(s)

    threads: list[threading.Thread] = []
    if load.rate > 0:
        rng = random.Random(load.seed)
        at = 0.0
        for i in range(load.requests):
            at += rng.expovariate(load.rate)
            time.sleep(max(0.0, t0 + at - time.perf_counter()))
            threads.append(threading.Thread(target=send, args=(i,), daemon=True))
            threads[-1].start()
    else:
        queue = list(range(load.requests))

        def user() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    i = queue.pop(0)
                send(i)

        threads = [threading.Thread(target=user, daemon=True) for _ in range(load.concurrency)]
        for t in threads:
            t.start()
    for t in threads:
        t.join(probe.budget.left() + 1.0)
    wall = time.perf_counter() - t0
    ok = [s for s in shots if s.error is None and s.ttft_s is not None]
    tpots = [s.tpot_s * 1000.0 for s in ok if s.tpot_s is not None]
    return {
        "load": load.name,
        "requests": load.requests,
        "completed": len(ok),
        "failed": len(shots) - len(ok),
        "ttft_ms_median": statistics.median(s.ttft_s * 1000.0 for s in ok if s.ttft_s) if ok else None,
        "tpot_ms_median": statistics.median(tpots) if tpots else None,
        "output_tok_s": sum(s.output_tokens for s in ok) / wall if wall > 0 else None,
    }


def compare(real: dict[str, Any], twin: dict[str, Any]) -> dict[str, float | None]:
    """The twin's relative error (twin / real - 1) on each summary number; None where either side has none."""
    out: dict[str, float | None] = {}
    for k in ("ttft_ms_median", "tpot_ms_median", "output_tok_s"):
        r, t = real.get(k), twin.get(k)
        out[k] = (t / r - 1.0) if r and t is not None else None
    return out
