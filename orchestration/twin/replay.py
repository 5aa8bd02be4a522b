"""A load replayed through the twin in virtual time: what the simulator serving a twin profile would answer to a
recorded load, without serving it.

The rules are the simulator's own, as api_replay.py's for a probe's burst: each request queues first on its
API-server process (round-robin, first come first served, `api_request_cost_us` + `api_prompt_token_cost_us` ×
its prompt), then waits `request_overhead_ms` before the engine sees it; the engine admits waiting requests
first come first served up to `max_num_seqs` at the start of each step, and steps as burst.engine_step does
(every decoding sequence, then prefill chunks within `max_num_batched_tokens`); every token out is one write of
`api_chunk_cost_us` on the request's process, and the stream's end one more. The twin's own path on the machine
that calibrated (ownpath.path_latency: the fit took it out, the served twin adds it back) is added as the served
twin pays it: its TTFT excess before the engine, its TPOT excess at the running batch on each step.

In virtual time the replay is the same on a busy 2-core box as on an idle one, and a load of 300 requests at
150 req/s takes well under a second of CPU: nothing is scaled down. The KV cache is not modelled (a load that
would fill it is not one of these; the twin's 534k-token cache holds 256 streams of 1,100 tokens twice over).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from orchestration.twin.burst import engine_step, step_config
from orchestration.twin.ownpath import tpot_excess
from orchestration.twin.predict import optional_value, ttft_excess

__all__ = ["Served", "replay"]

_MAX_STEPS = 2_000_000


@dataclass
class Served:
    """One request as the twin answered it (seconds since the load's start)."""

    sent_s: float
    prompt: int
    output: int
    chunk_s: list[float] = field(default_factory=list)  # each token's write, as the client reads it
    end_s: float = math.nan

    @property
    def ttft_s(self) -> float:
        """Time to the first token."""
        return self.chunk_s[0] - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (None under 2 tokens)."""
        n = len(self.chunk_s)
        return (self.chunk_s[-1] - self.chunk_s[0]) / (n - 1) if n >= 2 else None


def replay(
    c: dict[str, dict[str, Any]],
    prompts: list[int],
    outputs: list[int],
    *,
    arrivals_s: list[float] | None = None,
    users: int = 0,
    path: dict[str, Any] | None = None,
) -> list[Served]:
    """Every request of a load through the twin of constants `c`: open loop at `arrivals_s` (seconds from the
    start, one per request), or closed loop with `users` each sending its next request when its last one ended
    (requests in order). `path`: the profile's path_latency (the twin's own latency, added as when it serves)."""
    n = len(prompts)
    if len(outputs) != n or (arrivals_s is not None and len(arrivals_s) != n):
        raise ValueError("replay: prompts, outputs and arrivals must be as many")
    if arrivals_s is None and users < 1:
        raise ValueError("replay: a closed loop needs users >= 1")
    cfg = step_config(c)
    seats = int((c.get("max_num_seqs") or {}).get("value") or 256)
    procs = int(optional_value(c, "api_server_count"))
    req_s = optional_value(c, "api_request_cost_us") / 1e6
    tok_s = optional_value(c, "api_prompt_token_cost_us") / 1e6
    chunk_s = optional_value(c, "api_chunk_cost_us") / 1e6
    before_engine = c["request_overhead_ms"]["value"] / 1000.0 + ttft_excess({"path_latency": path}) / 1000.0
    free = [0.0] * max(procs, 1)
    proc = [0] * n
    served = [Served(math.nan, prompts[i], outputs[i]) for i in range(n)]
    sends: list[tuple[float, int]] = []
    if arrivals_s is not None:
        sends = [(a, i) for i, a in enumerate(arrivals_s)]
        heapq.heapify(sends)
        following = n
    else:
        sends = [(0.0, i) for i in range(min(users, n))]
        following = min(users, n)
    entries: list[tuple[float, int]] = []
    rr = 0

    def on_process(p: int, at: float, cost: float) -> float:
        free[p] = max(free[p], at) + cost
        return free[p]

    def take_sends(upto: float) -> None:
        nonlocal rr
        while sends and sends[0][0] <= upto:
            at, i = heapq.heappop(sends)
            served[i].sent_s = at
            if procs:
                proc[i], rr = rr % procs, rr + 1
                at = on_process(proc[i], at, req_s + tok_s * prompts[i])
            heapq.heappush(entries, (at + before_engine, i))

    computed, done = [0] * n, [0] * n
    waiting: deque[int] = deque()
    running: list[int] = []
    t = 0.0
    for _ in range(_MAX_STEPS):
        take_sends(t)
        while entries and entries[0][0] <= t:
            waiting.append(heapq.heappop(entries)[1])
        while waiting and len(running) < seats:
            running.append(waiting.popleft())
        if not running:
            nxt = min([q[0][0] for q in (sends, entries) if q], default=None)
            if nxt is None:
                break
            t = max(t, nxt)
            continue
        dec = [i for i in running if computed[i] >= prompts[i]]
        dur, chunks = engine_step(
            cfg, prompts, dec, [i for i in running if computed[i] < prompts[i]], computed, done
        )
        t += dur + tpot_excess(path, float(len(running))) / 1000.0
        take_sends(t)  # what arrived during the step is queued on its process before the step's writes
        emit = dec + [i for i, ch in chunks if computed[i] + ch >= prompts[i]]
        for i, ch in chunks:
            computed[i] += ch
        for i in emit:
            done[i] += 1
            served[i].chunk_s.append(on_process(proc[i], t, chunk_s) if procs else t)
            if done[i] >= outputs[i]:
                served[i].end_s = on_process(proc[i], t, chunk_s) if procs else t
                running.remove(i)
                if following < n:  # closed loop: this user's next request
                    heapq.heappush(sends, (served[i].end_s, following))
                    following += 1
    if any(math.isnan(s.end_s) for s in served):
        raise ValueError(f"replay: the load was not served within {_MAX_STEPS} engine steps")
    return served
