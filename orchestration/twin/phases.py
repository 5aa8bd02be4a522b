"""The probe's phases, in the order of what the twin needs most: prefill (TTFT by prompt length), decode (TPOT by
batch size), the limits at saturation (running requests, KV-cache usage), prefix-cache benefit.

Every phase appends its raw points to one dict as they are measured, so a Ctrl-C or a spent budget leaves what
was measured in it (calibrate fits and writes that). Their order, the later rounds and the progress lines are
orchestration.twin.progress.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from orchestration.twin.apiphase import engine_gaps, snapshot
from orchestration.twin.lsq import linfit
from orchestration.twin.probe import Probe, Shot, decoding_together, scrape

__all__ = [
    "CONTEXT",
    "ProbePlan",
    "batch_phase",
    "context_lengths",
    "context_phase",
    "new_raw",
    "prefix_phase",
    "saturation_phase",
    "seats_limit",
    "tpot_phase",
    "ttft_phase",
    "warmup",
]


@dataclass(frozen=True)
class ProbePlan:
    """What the probe sends (sized to stay inside its budget on a slow server)."""

    lengths: tuple[int, ...] = (32, 256, 768, 1536)
    repeats: int = 3
    concurrencies: tuple[int, ...] = (1, 2, 4, 8, 16)
    decode_tokens: int = 48
    # decode time by context: TPOT of one stream after the plan's two longest prompts (with the decode phase's
    # 32-token prompts, three context lengths). One, not more: streams whose long prefills land in different
    # steps put a whole prefill step inside the other's TPOT, which is not a decode cost
    context_concurrency: int = 1
    context_repeats: int = 2
    saturation_requests: int = 64
    saturation_prompt: int = 128
    saturation_tokens: int = 64
    block_size: int = 16  # vLLM's default, for the KV estimate when /metrics does not show cache_config_info
    # a fast server leaves most of the budget: more rounds of the TTFT and TPOT points (less noise in the fit),
    # while the probe is under this share of its budget, up to this many rounds
    fill: float = 0.5
    max_rounds: int = 5
    # the API-server phase (apiphase.py): bursts of max_tokens 1 requests at two prompt lengths, then many streams
    # of long outputs; fewer requests where the engine's prefill of a burst would be slow
    api_requests: int = 64
    api_lengths: tuple[int, ...] = (32, 1024)
    api_streams: int = 64
    api_tokens: int = 64

    def capped(self, max_model_len: int | None) -> ProbePlan:
        """The plan with prompt lengths that fit the server's context (prompt + output below max_model_len)."""
        if not max_model_len:
            return self
        room = int((max_model_len - self.decode_tokens - 16) * 0.9)
        lengths = tuple(sorted({min(n, room) for n in self.lengths if min(n, room) > 0}))
        api = tuple(sorted({min(n, room) for n in self.api_lengths if min(n, room) > 0}))
        return dataclasses.replace(
            self,
            lengths=lengths,
            saturation_prompt=min(self.saturation_prompt, max(8, room // 2)),
            api_lengths=api,
        )


def _ok(shots: list[Shot]) -> list[Shot]:
    return [s for s in shots if s.error is None and s.ttft_s is not None]


def _errors(raw: dict[str, Any], shots: list[Shot]) -> None:
    """Count failed shots by their reason (the budget's cut-offs among them)."""
    for s in shots:
        if s.error is not None:
            key = "budget" if s.error == "budget" else s.error.split(":")[0]
            raw["errors"][key] = raw["errors"].get(key, 0) + 1
            raw.setdefault("first_error", s.error)


def warmup(probe: Probe, raw: dict[str, Any]) -> None:
    """Two short requests: the server's first-request costs go here, and the prompt's tokens per word."""
    for _ in range(2):
        text, words = probe.prompt(64)
        s = probe.shot(text, 2, words)
        _errors(raw, [s])
        if s.error is None and s.prompt_tokens:
            probe.tokens_per_word = s.prompt_tokens / words
    raw["tokens_per_word"] = probe.tokens_per_word


def ttft_phase(probe: Probe, plan: ProbePlan, raw: dict[str, Any]) -> None:
    """TTFT at concurrency 1 over the plan's prompt lengths, interleaved so drift spreads over every length."""
    for _ in range(plan.repeats):
        for n in plan.lengths:
            if probe.budget.left() <= 0:
                return
            text, words = probe.prompt(n)
            s = probe.shot(text, 2, words)
            _errors(raw, [s])
            if s.error is None and s.ttft_s is not None:
                if (
                    not s.prompt_tokens
                ):  # a server without usage: the words' estimate, and the profile says so
                    raw["prompt_tokens_estimated"] = True
                n_tokens = s.prompt_tokens or round(words * probe.tokens_per_word)
                raw["ttft"].append({"prompt_tokens": n_tokens, "ttft_ms": s.ttft_s * 1000.0})


def _watch(probe: Probe, samples: list[dict[str, Any]], every: float = 0.05) -> Any:
    """A `during` callback: scrape /metrics every `every` s while the burst runs, with each stream's progress."""

    def during(shots: list[Shot]) -> None:
        while not all(s.done for s in shots) and probe.budget.left() > 0:
            m = scrape(probe)
            if m is not None:
                m["progress"] = [
                    (i, s.tokens_seen) for i, s in enumerate(shots) if s.tokens_seen and not s.done
                ]
                samples.append(m)
            time.sleep(every)

    return during


def _tpot_point(
    probe: Probe, plan: ProbePlan, raw: dict[str, Any], c: int, length: int, phase: str | None = None
) -> None:
    """One TPOT point: c streams of `length`-token prompts started together, decoding as one batch (`phase`
    names the phase that measured it, where the fit treats its points apart)."""
    specs = [(*probe.prompt(length), plan.decode_tokens) for _ in range(c)]
    samples: list[dict[str, Any]] = []
    before = snapshot(probe)
    shots = probe.burst([(p, mt, w) for p, w, mt in specs], _watch(probe, samples, 0.1))
    after = snapshot(probe)
    _errors(raw, shots)
    ok = [s for s in _ok(shots) if s.tpot_s is not None]
    if len(ok) < len(shots):
        return  # a cut or failed stream changes the batch the others decoded in: no point
    seen = [m["running"] for m in samples if m.get("running") is not None]
    # the scrapes' peak, or the client's own count where the scrapes missed it (a burst shorter than their period)
    together = decoding_together(ok)
    peak = max(int(max(seen)) if seen else 0, together or 0)
    batch = max(1, min(c, peak)) if seen or together is not None else c
    # with fewer seats than streams, the first `batch` to start decoding decoded together
    first = sorted(ok, key=lambda s: s.started + (s.ttft_s or 0.0))[:batch]
    prompt = statistics.mean(
        s.prompt_tokens or round(s.words * probe.tokens_per_word) or length for s in first
    )
    out = {s.output_tokens for s in first}
    n = out.pop() if len(out) == 1 else plan.decode_tokens
    # the engine's own TPOT over the burst (its histograms, stamped by the engine core), and the clients' share
    # above it: the API server's, which the engine's constants must not absorb (fit._decode)
    gaps = engine_gaps(before, after, ok)
    # the context each one attends over, averaged over the steps TPOT spans (outputs 1 .. n-1 already there)
    point: dict[str, Any] = {
        "concurrency": c,
        "batch": batch,
        "prompt_tokens": round(prompt, 1),
        "output_tokens": n,
        "context_tokens": round(batch * (prompt + n / 2.0), 1),
        "tpot_ms": statistics.median(s.tpot_s * 1000.0 for s in first if s.tpot_s),
        "tpot_spread_ms": _spread([s.tpot_s * 1000.0 for s in first if s.tpot_s]),
    }
    if "tpot_gap_ms" in gaps:
        point.update(engine_tpot_ms=gaps["engine_tpot_ms"], api_tpot_ms=gaps["tpot_gap_ms"])
    if phase:
        point["phase"] = phase
    raw["tpot"].append(point)


def tpot_phase(probe: Probe, plan: ProbePlan, raw: dict[str, Any]) -> None:
    """TPOT of c streams started together: every one decodes in a batch of c once their prefills are done."""
    for c in plan.concurrencies:
        # the intercept rests on c = 1: measure it thrice, the others twice
        for _ in range(3 if c == 1 else 2):
            if probe.budget.left() <= 0:
                return
            _tpot_point(probe, plan, raw, c, 32)


CONTEXT = "context"  # the context phase's points: the fit takes the context term from them alone


def context_lengths(plan: ProbePlan) -> list[int]:
    """The context phase's prompt lengths, in the order sent: the plan's shortest, then its two longest."""
    return [min(plan.lengths), *sorted(n for n in plan.lengths if n > min(plan.lengths))[-2:]]


def context_phase(probe: Probe, plan: ProbePlan, raw: dict[str, Any]) -> None:
    """TPOT of a small fixed batch (one stream) after a short and the two longest prompts, in turn: how a decode
    step's time grows with the context. The short one is measured here too, beside the long ones: compared with
    the decode phase's, measured minutes earlier, a machine whose load changed between the phases read as a
    context term (0.22 µs per token for a simulator with none, a third of the twin's throughput)."""
    for _ in range(plan.context_repeats):
        for n in context_lengths(plan):
            if probe.budget.left() <= 0:
                return
            _tpot_point(probe, plan, raw, plan.context_concurrency, n, CONTEXT)


# the burst's prefill work, at the TTFT phase's first estimate of the rate: bounded on a slow server
BURST_SECONDS = 1.5


def _rate_guess(raw: dict[str, Any]) -> float | None:
    """Prefill tokens/s from the TTFT points so far (a least-squares slope); None when it does not rise."""
    pts = raw.get("ttft") or []
    try:
        b = linfit([float(p["prompt_tokens"]) for p in pts], [float(p["ttft_ms"]) for p in pts]).b
    except ValueError:
        return None
    return 1000.0 / b if b > 0 else None


def batch_phase(probe: Probe, plan: ProbePlan, raw: dict[str, Any]) -> None:
    """B streams of the plan's longest prompt at once: the last TTFT and the sends' offsets (raw["bursts"]), and,
    while all B decode, their TPOT over their whole context (kept in the burst's record, not fitted)."""
    if probe.budget.left() <= 0:
        return
    length, n = max(plan.lengths), plan.decode_tokens
    b = max(plan.concurrencies)
    guess = _rate_guess(raw)
    if guess:
        # 3 streams at least: the first arrival starts a step alone, so only a third shows whether the other two
        # share one step (a token budget above 2 prompts) or not (vLLM for CPU's 2,048)
        b = min(b, max(3, int(BURST_SECONDS * guess / length)))
    specs = [(*probe.prompt(length), n) for _ in range(b)]
    samples: list[dict[str, Any]] = []
    shots = probe.burst([(p, mt, w) for p, w, mt in specs], _watch(probe, samples, 0.1), times=True)
    _errors(raw, shots)
    ok = [s for s in shots if s.error is None and s.ttft_s is not None and s.times]
    seen = [int(m["running"]) for m in samples if m.get("running") is not None]
    if len(ok) < b or (seen and max(seen) < b):
        return  # a cut stream, or fewer seats than streams: not one batch of b
    prompts = [float(s.prompt_tokens or round(s.words * probe.tokens_per_word) or length) for s in ok]
    ttfts = [s.ttft_s * 1000.0 for s in ok if s.ttft_s is not None]
    t0 = min(s.started for s in ok)  # the sends' spread: a step starts on the first arrival (burst.py)
    raw.setdefault("bursts", []).append(
        {
            "streams": b,
            "prompt_tokens": round(statistics.mean(prompts), 1),
            "output_tokens": n,
            "last_ttft_ms": max(ttfts),
            "first_ttft_ms": min(ttfts),
            "ttfts_ms": [round(t, 3) for t in ttfts],
            "offsets_ms": [round(1000.0 * (s.started - t0), 3) for s in ok],
        }
    )
    t_all = max(s.times[0] for s in ok if s.times)
    t_end = min(s.times[-1] for s in ok if s.times)
    tpots = []
    for s in ok:
        ts = [t for t in s.times or [] if t_all <= t <= t_end]
        if len(ts) >= 4:
            tpots.append((ts[-1] - ts[0]) / (len(ts) - 1) * 1000.0)
    if len(tpots) < len(ok):
        return  # the prefills took longer than the outputs: no moment when all b decoded
    mid = (t_all + t_end) / 2.0
    ctx = sum(p + sum(1 for t in s.times or [] if t <= mid) for s, p in zip(ok, prompts, strict=True))
    # kept beside the burst, not fitted: in the plane fit this one point of large context pulled the context
    # term to 4.11 ± 0.08 µs on a simulator of 4.0 (a busy machine's TPOT excess at that batch is not corrected)
    raw["bursts"][-1].update(decode_tpot_ms=statistics.median(tpots), decode_context_tokens=round(ctx, 1))


def _spread(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def seats_limit(samples: list[dict[str, Any]], scrapes: int = 2) -> int | None:
    """The server's seat limit seen in /metrics scrapes: the most requests running at once, when at that count
    others waited in `scrapes` scrapes or more; None when the count never held with a queue behind it.

    A burst's arrivals wait for a step or two before the scheduler admits them (a prefill token budget admits so
    many per step), so "running while some waited" alone is not a limit: 33 ran with 31 waiting in one scrape,
    then all 64 ran, on a simulator of 256 seats, and the twin was fitted 33 (half the server's throughput)."""
    runs = [int(m["running"]) for m in samples if m.get("running") is not None]
    if not runs:
        return None
    top = max(runs)
    held = sum(
        1
        for m in samples
        if m.get("running") is not None and int(m["running"]) == top and (m.get("waiting") or 0) > 0
    )
    return top if held >= scrapes else None


def saturation_phase(probe: Probe, plan: ProbePlan, raw: dict[str, Any]) -> None:
    """More streams than the server runs at once: the most running (while some wait) is its max-num-seqs, and
    KV-cache usage against the tokens the running streams hold is its KV capacity."""
    if probe.budget.left() <= 0:
        return
    k = plan.saturation_requests
    specs = [(*probe.prompt(plan.saturation_prompt), plan.saturation_tokens) for _ in range(k)]
    samples: list[dict[str, Any]] = []
    shots = probe.burst([(p, mt, w) for p, w, mt in specs], _watch(probe, samples))
    _errors(raw, shots)
    running = [m["running"] for m in samples if m.get("running") is not None]
    sat: dict[str, Any] = {
        "requests": k,
        "scrapes": len(samples),
        "max_running": max(running) if running else None,
        "max_running_while_waiting": seats_limit(samples),
        "kv_samples": [],
    }
    for m in samples:
        if m.get("num_gpu_blocks") and m.get("block_size"):
            sat["cache_config"] = {
                "num_gpu_blocks": int(float(m["num_gpu_blocks"])),
                "block_size": int(float(m["block_size"])),
            }
        u = m.get("kv_usage")
        prog = m.get("progress") or []
        # only where every running stream is one we saw decoding: then we know what each one holds
        if not u or m.get("running") is None or int(m["running"]) != len(prog) or not prog:
            continue
        held = 0
        for i, seen in prog:
            p = shots[i].prompt_tokens or round(shots[i].words * probe.tokens_per_word)
            held += math.ceil((p + seen + 1) / plan.block_size) * plan.block_size
        sat["kv_samples"].append({"usage": u, "held_tokens": held, "running": len(prog)})
    raw["saturation"] = sat


def prefix_phase(probe: Probe, plan: ProbePlan, raw: dict[str, Any]) -> None:
    """The same prompt twice, one after the other: the second TTFT shows what a prefix-cache hit saves."""
    n = max(plan.lengths)
    for _ in range(2):
        if probe.budget.left() <= 0:
            return
        text, words = probe.prompt(n)
        cold = probe.shot(text, 2, words)
        before = scrape(probe) or {}
        warm = probe.shot(text, 2, words)
        after = scrape(probe) or {}
        _errors(raw, [cold, warm])
        if cold.ttft_s is not None and warm.ttft_s is not None and cold.error is None and warm.error is None:
            # the server's own count of the tokens it took from its cache for the second one, where it shows it:
            # on a GPU a prefill can cost less than the TTFT's noise, and the TTFTs alone cannot tell
            hits = (
                after["prefix_hits"] - before["prefix_hits"]
                if after.get("prefix_hits") is not None and before.get("prefix_hits") is not None
                else None
            )
            raw["prefix"].append(
                {
                    "prompt_tokens": cold.prompt_tokens,
                    "cold_ms": cold.ttft_s * 1000.0,
                    "warm_ms": warm.ttft_s * 1000.0,
                    "cached_tokens": hits,
                    "config": after.get("prefix_caching"),
                }
            )


def new_raw() -> dict[str, Any]:
    """The empty record of a probe's raw points."""
    return {"ttft": [], "tpot": [], "saturation": None, "prefix": [], "errors": {}, "phases_done": []}
