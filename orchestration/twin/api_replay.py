"""A TPOT point replayed as the twin serves it behind its API-server stage (vllm_sim.apiserver): the clients' TPOT
the twin gives c streams started together.

Where the API server holds the chunks back, the steady-state rate (predict.predict_tpot_ms: `batch × chunk cost / N`
per token) is not what a probe's burst of 48 tokens sees. The requests reach the engine one request cost apart,
the batch fills while the first streams already decode, and the chunk queue grows only through the burst: against
the simulator itself (2 ms + 0.014 ms per sequence, one process at 1,500 µs per request and 100 µs per chunk) the
steady state said 3.2, 6.4 and 15.7 ms at 32, 64 and 116 streams where the burst read 2.8, 4.9 and 9.9. The replay
runs the simulator's own rules in virtual time: each process first come first served (a request's cost before it
reaches the engine, each chunk's before it is written, the stream's end as one more chunk), the engine stepping
as burst.engine_step does, never waiting for the writes.
"""

from __future__ import annotations

import statistics

from orchestration.twin.burst import engine_step
from vllm_sim.config import SimConfig

__all__ = ["replay_api_tpot_ms"]

_MAX_STEPS = 100_000


def replay_api_tpot_ms(
    cfg: SimConfig,
    streams: int,
    prompt: int,
    output: int,
    *,
    processes: int,
    request_us: float,
    chunk_us: float,
    seats: int | None = None,
    batch: int | None = None,
) -> float | None:
    """The median clients' TPOT (ms) of the first `batch` streams to decode (all by default) when `streams` requests
    of `prompt` tokens and `output` tokens each arrive together at `processes` API-server processes of the given
    costs (µs) in front of an engine of `cfg`'s step costs with `seats` sequences at most; None under 2 tokens."""
    if output < 2 or streams < 1 or processes < 1:
        return None
    free = [0.0] * processes
    arrive = []
    for i in range(streams):  # every request is queued at t = 0, round-robin, before any chunk
        p = i % processes
        free[p] += request_us / 1e6
        arrive.append(free[p])
    order = sorted(range(streams), key=lambda i: arrive[i])
    seats = seats or streams
    computed, done = [0] * streams, [0] * streams
    first: list[float | None] = [None] * streams
    last: list[float] = [0.0] * streams
    running: list[int] = []
    queue = list(order)
    t = arrive[order[0]]

    def write(i: int, at: float) -> float:
        p = i % processes
        free[p] = max(free[p], at) + chunk_us / 1e6
        return free[p]

    for _ in range(_MAX_STEPS):
        while queue and len(running) < seats and arrive[queue[0]] <= t:
            running.append(queue.pop(0))
        if not running:
            if not queue:
                break
            t = arrive[queue[0]]
            continue
        dec = [i for i in running if computed[i] >= prompt]
        dur, chunks = engine_step(
            cfg, prompt, dec, [i for i in running if computed[i] < prompt], computed, done
        )
        t += dur
        emit = dec + [i for i, ch in chunks if computed[i] + ch >= prompt]
        for i, ch in chunks:
            computed[i] += ch
        for i in emit:
            done[i] += 1
            last[i] = write(i, t)
            if first[i] is None:
                first[i] = last[i]
            if done[i] >= output:
                write(i, t)  # the stream's end: one more write on its process
                running.remove(i)
    started = sorted((f, i) for i, f in enumerate(first) if f is not None and done[i] >= output)
    kept = [i for _, i in started[: batch or streams]]
    if not kept:
        return None
    return 1000.0 * statistics.median((last[i] - (first[i] or 0.0)) / (output - 1) for i in kept)
