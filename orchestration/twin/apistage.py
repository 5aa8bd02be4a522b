"""The API server in front of the engine (vllm_sim/apiserver.py): the fit of its three costs from the bursts that
load it without loading the engine (apiphase.py).

vLLM's API server (HTTP, chat template, tokenising, detokenising, SSE; one event loop per process) is a single
server per process: at saturation it completes one request per `A + B·P + C` seconds (its per-request cost, per
prompt token and per output chunk; a `max_tokens` 1 stream is one chunk) and writes one chunk per `C`. So:

- requests: a burst of many `max_tokens` 1 requests at once at two prompt lengths; the process is busy from the
  first send to the last answer, and N × span / requests is `A + B·P + C` (B from the two lengths);
- chunks: many streams with long outputs at once; while every stream decodes, the process writes chunks one after
  another, and N × window / chunks written in it is `C`.

Those throughputs are the engine's as well when the engine is the slower side, so each is kept only where the
engine's own histograms say the time went elsewhere: the client's mean TTFT (TPOT) above the engine's
(vllm_users.measure.latency_breakdown, from /metrics before and after the burst) must exceed what the same burst
shows on a local simulator without the stage (this machine's HTTP path and our client) by more than that much
again. Where it does not, the constant is left out of the profile (the twin has no API-server stage) and the
fit says why. N, the API-server process count, is not measured: `--api-server-count` of calibrate (vLLM's
default 1).

Which histograms are the engine's: vLLM's TTFT histogram runs from the request's arrival in the API server to the
moment that process handles the first token, so a busy API server shows inside it (on an H100 with one process,
64 requests of 38 tokens at once read 36 ms of "engine" TTFT for a prefill the GPU does in one step). Its queue
and prefill histograms are stamped by the engine core (queued, scheduled, first token), and so are its TPOT and
inter-token histograms (the engine's output timestamps). The engine's TTFT here is queue + prefill where the
server exports both, the TTFT histogram where not (the simulator, older servers).

Where a chunk burst does not resolve the chunk cost (the engine kept pace with the process at its concurrency),
the TPOT points can: a point whose clients read well above the engine's own TPOT waited for the process, and
says how long it spent per chunk (`_chunk_from_tpot`; on the simulator at 200 µs a chunk, 32 streams read 5.9 ms
against the engine's 2.3). On vLLM 0.26 with one API server on an H100 no point did: its TPOT histogram followed
the clients' (12.2 against 12.3 ms at 256 streams). vLLM merges a stream's waiting tokens into one chunk when its
API server is behind (0.68 chunks per token at 1,024 streams there), which keeps the clients' TPOT near the
engine's; the simulator's stage does not merge (docs/twin.md).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from orchestration.twin.lsq import RESOLUTION_MS, SIGMAS

__all__ = [
    "API_BOUND_SHARE",
    "API_CONSTANTS",
    "admissions_per_step",
    "engine_bound_burst",
    "fit_api",
    "held_back",
    "measured_seats",
    "predict_api",
]

API_CONSTANTS = ("api_server_count", "api_request_cost_us", "api_prompt_token_cost_us", "api_chunk_cost_us")


def measured_seats(raw: dict[str, Any]) -> int | None:
    """The seat limit the saturation phase saw (requests running while others waited); None where it saw none."""
    seats = (raw.get("saturation") or {}).get("max_running_while_waiting")
    return int(seats) if seats else None


def _const(value: Any, unc: float | None, unit: str, note: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"value": value, "uncertainty": unc, "unit": unit, "source": "fit"}
    if note:
        out["note"] = note
    return out


def _mean_se(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0)


def _resolved(
    pts: list[dict[str, Any]], own: list[dict[str, Any]], gap: str, floor: float
) -> tuple[bool, str]:
    """Whether the server's mean gap over these bursts is above the local simulator's by more than that gap
    again (and the floor): (verdict, the numbers that gave it)."""
    if not pts:
        return False, "no burst kept"
    got = [p[gap] for p in pts if p.get(gap) is not None]
    base = [p[gap] for p in own if p.get(gap) is not None]
    if not got:
        return False, f"no {gap.split('_')[0].upper()} histogram in /metrics: the gap is not known"
    g = statistics.mean(got)
    b = statistics.mean(base) if base else 0.0
    what = f"client {gap.split('_')[0].upper()} {g:.3g} ms above the engine's (this machine's own path {b:.3g} ms)"
    return g - b > max(abs(b), floor), what


# a TPOT point (a stream burst) whose clients read this share above the engine's own TPOT (and above the timing
# resolution) waited for the API server's writes, not for the engine's steps. A simulator's process at its limit
# read +76 % to +160 % at 64-256 streams; on a noisy H100 with four API servers, points at 256 streams read
# +12 % to +18 % with the engine the slower side (its TPOT at batch 1 ranging 1.6-4.1 ms)
API_BOUND_SHARE = 0.25


def engine_bound_burst(p: dict[str, Any]) -> bool:
    """Whether a request burst's requests waited longer in the engine than outside it: its span is the engine's
    throughput (its prefills), not the API server's."""
    return p["kind"] == "request" and (p.get("engine_ttft_ms") or 0.0) > (p.get("ttft_gap_ms") or 0.0)


def _over_share(gap: float | None, engine: float | None) -> bool:
    """Whether the clients' TPOT above the engine's is over API_BOUND_SHARE of the engine's."""
    return gap is not None and bool(engine) and gap > API_BOUND_SHARE * float(engine or 0.0)


def held_back(p: dict[str, Any]) -> bool:
    """Whether a TPOT point's clients read enough above the engine's own TPOT to have waited for the API server."""
    gap = p.get("api_tpot_ms")
    return _over_share(gap, p.get("engine_tpot_ms")) and float(gap or 0.0) > RESOLUTION_MS


def admissions_per_step(point: dict[str, Any], seats: float | None) -> float:
    """Requests the API server took in per engine step while a TPOT point's streams decoded: batch / output tokens
    where the batch stayed under its streams (and the seats), the rest still on their way in; else 0."""
    b, c, n = float(point["batch"]), float(point["concurrency"]), point.get("output_tokens")
    if not n or b >= 0.9 * min(c, seats or c):
        return 0.0
    return b / float(n)


def _chunk_from_tpot(
    pts: list[dict[str, Any]], processes: int, per_request_ms: float | None, seats: float | None
) -> tuple[float, float, str] | None:
    """The per-chunk cost (µs per process, its uncertainty, why) from the TPOT points the API server held back: its
    N processes spent each of the clients' TPOT writing one chunk per stream of the batch and taking in the
    requests admitted meanwhile, so C = N × (TPOT − admissions × per-request time) / batch. None: no such point
    (or only points with admissions, and no per-request time to take out)."""
    got: list[float] = []
    for p in pts:
        if not held_back(p):
            continue
        r = admissions_per_step(p, seats)
        if r > 0 and per_request_ms is None:
            continue
        c_ms = processes * (float(p["tpot_ms"]) - r * (per_request_ms or 0.0)) / float(p["batch"])
        if c_ms > 0:
            got.append(c_ms)
    if not got:
        return None
    c_ms, se = _mean_se(got)
    why = (
        f"{len(got)} TPOT points where the clients read over {100 * API_BOUND_SHARE:.0f} % above the engine's TPOT "
        "(the chunk bursts did not resolve it)"
    )
    return 1000.0 * c_ms, 1000.0 * max(SIGMAS * se, RESOLUTION_MS / max(len(got), 1)), why


def _chunk_bound(chunks: list[dict[str, Any]], processes: int, why: str) -> tuple[float, float, str]:
    """The per-chunk cost (µs per process) where the chunk burst only bounds it, and its uncertainty: the chunks
    went out at the engine's rate (the clients' TPOT a few % above the engine's), so the process took at most the
    window over its chunks for each; the twin takes the middle of [0, that], half of it either way. Left out (0),
    the bound's low end, the twin's API server was idle between requests under a stream of writes."""
    top = 1000.0 * processes * min(float(p["per_chunk_ms"]) for p in chunks)
    note = f"bounded, not measured: at most {top:.3g} µs (the chunk burst's window over its chunks); {why}"
    return top / 2.0, top / 2.0, note


def fit_api(raw: dict[str, Any], processes: int = 1) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The API-server constants where the gaps resolve them (else none) and a line per decision."""
    pts, own = raw.get("api") or [], raw.get("api_own") or []
    reqs = [p for p in pts if p["kind"] == "request"]
    chunks = [p for p in pts if p["kind"] == "chunk"]
    notes = [
        f"{p['kind']} burst of {p['what']} not kept: {p['dropped']}" for p in raw.get("api_dropped") or []
    ]
    out: dict[str, dict[str, Any]] = {}
    if not reqs and not chunks and not any("api_tpot_ms" in p for p in raw.get("tpot") or []):
        return out, [*notes, "no API-server bursts measured: no API-server stage in the twin"]
    own_req = [p for p in own if p["kind"] == "request"]
    own_chunk = [p for p in own if p["kind"] == "chunk"]
    # a burst whose requests waited longer in the engine than outside it was the engine's (its prefills): its
    # span is the engine's throughput, not the API server's
    engine_bound = [p for p in reqs if engine_bound_burst(p)]
    if engine_bound:
        n = sorted({p["prompt_tokens"] for p in engine_bound})
        notes.append(f"request bursts at {n} prompt tokens left out: the engine's TTFT was above the gap")
    reqs = [p for p in reqs if p not in engine_bound]
    ok_r, why_r = _resolved(reqs, own_req, "ttft_gap_ms", RESOLUTION_MS)
    lengths = sorted({p["prompt_tokens"] for p in reqs})
    by = {n: _mean_se([p["per_request_ms"] for p in reqs if p["prompt_tokens"] == n]) for n in lengths}
    c_us = uc_us = 0.0
    ok_c, why_c = _resolved(chunks, own_chunk, "tpot_gap_ms", 0.05)
    bounded = False
    engine_tpot = [p["engine_tpot_ms"] for p in chunks if p.get("engine_tpot_ms")]
    gap_tpot = [p["tpot_gap_ms"] for p in chunks if p.get("tpot_gap_ms") is not None]
    if ok_c and engine_tpot and gap_tpot:
        # a gap of a few % of the engine's TPOT is not a process writing chunks at its limit: on an H100 with four
        # API servers, 0.07 ms over 2.9 ms made a 196-µs chunk cost (the engine's own rate) and capped the twin
        gap, engine = statistics.mean(gap_tpot), statistics.mean(engine_tpot)
        if not _over_share(gap, engine):
            ok_c, bounded = False, True
            why_c += f": {100 * gap / engine:.1f} % of the engine's TPOT, under {100 * API_BOUND_SHARE:.0f} %"
    if chunks and ok_c:
        c_ms, se = _mean_se([p["per_chunk_ms"] for p in chunks])
        res = max(RESOLUTION_MS / p["chunks"] for p in chunks)
        c_us, uc_us = 1000.0 * processes * c_ms, 1000.0 * processes * max(SIGMAS * se, res)
        out["api_chunk_cost_us"] = _const(c_us, uc_us, "µs", why_c)
    else:
        short = by[lengths[0]][0] if reqs and ok_r else None
        got = _chunk_from_tpot(raw.get("tpot") or [], processes, short, measured_seats(raw))
        if got is not None:
            c_us, uc_us, why_c = got
            out["api_chunk_cost_us"] = _const(c_us, uc_us, "µs", why_c)
        elif bounded:
            c_us, uc_us, why_c = _chunk_bound(chunks, processes, why_c)
            out["api_chunk_cost_us"] = _const(c_us, uc_us, "µs", why_c)
    notes.append(
        ("per-chunk cost fitted: " if "api_chunk_cost_us" in out else "per-chunk cost left out: ") + why_c
    )
    if reqs and ok_r:
        res = max(RESOLUTION_MS / p["requests"] for p in reqs)
        lo, hi = lengths[0], lengths[-1]
        (t_lo, se_lo), (t_hi, se_hi) = by[lo], by[hi]
        u_lo, u_hi = max(SIGMAS * se_lo, res), max(SIGMAS * se_hi, res)
        b_us = ub_us = 0.0
        if hi <= lo:
            notes.append("per-prompt-token cost left out: one prompt length only (the request cost holds it)")
        else:
            b_us = 1000.0 * processes * (t_hi - t_lo) / (hi - lo)
            ub_us = 1000.0 * processes * math.hypot(u_lo, u_hi) / (hi - lo)
            note = None if b_us >= 0 else f"the fit said {b_us:.3g} µs (below 0): 0"
            out["api_prompt_token_cost_us"] = _const(max(b_us, 0.0), ub_us, "µs", note)
        a_us = 1000.0 * processes * t_lo - max(b_us, 0.0) * lo - c_us
        ua_us = math.hypot(1000.0 * processes * u_lo, ub_us * lo, uc_us)
        note = why_r if a_us >= 0 else f"the fit said {a_us:.3g} µs (below 0): 0; {why_r}"
        out["api_request_cost_us"] = _const(max(a_us, 0.0), ua_us, "µs", note)
    notes.append(("per-request cost fitted: " if ok_r and reqs else "per-request cost left out: ") + why_r)
    if out:
        out = {
            "api_server_count": {
                "value": processes,
                "uncertainty": None,
                "unit": "processes",
                "source": "given",
                "note": "--api-server-count of calibrate: the costs are per process",
            },
            **out,
        }
    else:
        notes.append("no API-server stage in the twin (the gaps are this machine's own)")
    return out, notes


def predict_api(c: dict[str, Any], point: dict[str, Any]) -> float | None:
    """The twin's ms per request (a request burst) or per chunk (a chunk burst) at saturation; None without a
    stage."""
    n = int((c.get("api_server_count") or {}).get("value") or 0)
    if n <= 0:
        return None

    def v(name: str) -> float:
        return float((c.get(name) or {}).get("value") or 0.0)

    if point["kind"] == "chunk":
        return v("api_chunk_cost_us") / 1000.0 / n
    cost = v("api_request_cost_us") + v("api_prompt_token_cost_us") * float(point["prompt_tokens"])
    return (cost + v("api_chunk_cost_us")) / 1000.0 / n
