"""What the twin's own path adds on this machine: a local simulator with known constants, timed by the probe's own
client, at the server's step. The fit takes it out of the server's points and the twin adds it back when it serves
(HTTP, tokenizing, event-loop timers, this client)."""

from __future__ import annotations

import statistics
from typing import Any

from orchestration.twin.probe import Budget, Probe

__all__ = ["PATH_STEP_MS", "PATH_STEP_RANGE_MS", "path_latency", "server_step_ms", "tpot_excess"]


# the local simulator's step where the server's is not known; bounds on one taken from the server
PATH_STEP_MS, PATH_STEP_RANGE_MS = 10.0, (1.0, 50.0)


def server_step_ms(probe: Probe, tokens: int = 24) -> float | None:
    """The server's TPOT of one stream alone, ms (the second of two requests: the first pays first-request
    costs); None where neither answered with one."""
    got = None
    for _ in range(2):
        s = probe.shot(probe.prompt(32)[0], tokens)
        if s.error is None and s.tpot_s:
            got = s.tpot_s * 1000.0
    return got


def path_latency(
    budget_s: float, batches: tuple[int, ...] = (1, 16), n: int = 12, step_ms: float | None = None
) -> dict[str, Any] | None:
    """What the simulator's own path adds on this machine (HTTP, event-loop timers, this client), measured on a
    simulator with known constants: the TTFT excess over its model, and the TPOT excess at a few batch sizes (a
    step that ends late by more than 1 ms pushes the next one: more streams, more work per step, more drift). The
    twin adds the same again when it serves, so the fit takes it out of the real server's points. Its steps last
    `step_ms`, the server's own where known (within PATH_STEP_RANGE_MS): the excess depends on the step, and a
    2-core VM read 0.25-0.6 ms at 9-10 ms steps and 0.00-0.02 ms at 1-7, 11-20 ms, so a fixed 10 ms took 0.4 ms
    off a 2-ms server's TPOT. None when the simulator cannot start."""
    from vllm_sim.launch import start_simulator  # the twin itself: the only simulator the probe starts

    lo, hi = PATH_STEP_RANGE_MS
    step_ms = min(max(step_ms, lo), hi) if step_ms else PATH_STEP_MS
    ttft_ms, tokens = 5.0 + step_ms, 32  # 5 ms overhead + one step; prefill too fast to count
    try:
        sim = start_simulator(
            [
                "--request-overhead-ms",
                "5",
                "--decode-step-ms",
                str(step_ms),
                "--decode-per-seq-ms",
                "0",
                "--prefill-tokens-per-s",
                "1e12",
            ],
            timeout=max(1.0, min(20.0, budget_s)),
        )
    except (RuntimeError, OSError):
        return None
    out: dict[str, Any] = {"ttft": None, "tpot": [], "step_ms": round(step_ms, 3)}
    try:
        probe = Probe(sim.url, "sim-model", Budget(min(20.0, budget_s)))
        # at a short and a long prompt: parsing, tokenizing and hashing a prompt cost time by its length too
        by_len: dict[int, list[float]] = {32: [], 1536: []}
        for i in range(n + 3):
            for length, got in by_len.items():
                s = probe.shot(*probe.prompt(length)[:1], 2)
                if (
                    s.ttft_s is not None and s.error is None and i >= 3
                ):  # the first requests warm the server up
                    got.append(s.ttft_s * 1000.0 - ttft_ms)
        if all(len(v) >= 3 for v in by_len.values()):
            short, long = by_len[32], by_len[1536]
            out["ttft"] = {
                "excess_ms": statistics.median(short),
                "spread_ms": statistics.stdev(short),
                "n": len(short),
                "per_token_ms": (statistics.median(long) - statistics.median(short)) / (1536 - 32),
                "at_tokens": 32,
            }
        for b in batches:
            medians = []
            for _ in range(3):  # the machine's load comes and goes: the median of three bursts
                shots = probe.burst([(probe.prompt(32)[0], tokens, 0) for _ in range(b)])
                tpots = [s.tpot_s * 1000.0 for s in shots if s.error is None and s.tpot_s is not None]
                if len(tpots) == b:
                    medians.append(statistics.median(tpots))
            if medians:
                out["tpot"].append(
                    {"batch": b, "excess_ms": statistics.median(medians) - step_ms, "bursts": len(medians)}
                )
    finally:
        sim.stop()
    return out


def tpot_excess(path: dict[str, Any] | None, batch: float) -> float:
    """The simulator's own TPOT excess at `batch`, interpolated (flat beyond what was measured); 0 unknown."""
    pts = sorted((p["batch"], p["excess_ms"]) for p in ((path or {}).get("tpot") or []))
    if not pts:
        return 0.0
    if batch <= pts[0][0] or len(pts) == 1:
        return float(pts[0][1])
    for (b0, e0), (b1, e1) in zip(pts, pts[1:], strict=False):
        if batch <= b1:
            return float(e0 + (e1 - e0) * (batch - b0) / (b1 - b0))
    return float(pts[-1][1])
