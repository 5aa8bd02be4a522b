"""The probe's API-server phase (the fit: apistage.py): bursts that load vLLM's API server without loading its
engine, each with the gap between the clients' times and the engine's own histograms over it.

- requests: a burst of many `max_tokens` 1 requests at once at two prompt lengths; the process is busy from the
  first send to the last answer;
- chunks: many streams with long outputs at once; while every stream decodes, the process writes chunks one after
  another;
- the same bursts first on a local simulator without a stage (this machine's HTTP path and our client).

The engine's TTFT over a burst is its queue + prefill where the server exports both (stamped by the engine core),
else its TTFT histogram (the simulator, older servers): vLLM's TTFT histogram runs in the API server.
"""

from __future__ import annotations

import statistics
from typing import Any

from orchestration.twin.apistage import measured_seats
from orchestration.twin.probe import Budget, Probe, Shot
from vllm_users.measure.latency_breakdown import ClientLatency, core_ttft_ms, server_part
from vllm_users.measure.server_counters import parse_metrics

__all__ = ["api_measure", "api_own", "api_phase", "engine_gaps", "snapshot"]


def snapshot(probe: Probe) -> dict[str, float] | None:
    """The server's /metrics, parsed; None when it does not answer or is not Prometheus text."""
    status, body = probe.get("/metrics", timeout=2.0)
    if status != 200:
        return None
    try:
        return parse_metrics(body.decode(errors="replace"))
    except ValueError:
        return None


def _client(shots: list[Shot]) -> ClientLatency:
    ttft = [s.ttft_s * 1000.0 for s in shots if s.ttft_s is not None]
    tpot = [s.tpot_s * 1000.0 for s in shots if s.tpot_s is not None]
    return ClientLatency(
        requests=len(ttft),
        ttft_mean_ms=statistics.mean(ttft) if ttft else None,
        ttft_p50_ms=statistics.median(ttft) if ttft else None,
        tpot_mean_ms=statistics.mean(tpot) if tpot else None,
        tpot_p50_ms=statistics.median(tpot) if tpot else None,
    )


def engine_gaps(
    before: dict[str, float] | None, after: dict[str, float] | None, shots: list[Shot]
) -> dict[str, Any]:
    """The client's mean TTFT and TPOT above the engine's over the burst (absent: not exported); the engine's TTFT
    is its queue + prefill where both are exported (the engine core's own stamps), else its TTFT histogram."""
    if before is None or after is None:
        return {}
    client = _client(shots)
    part = server_part(before, after, client)
    out: dict[str, Any] = {}
    ttft, tpot = part.get("ttft") or {}, part.get("tpot") or {}
    engine = core_ttft_ms(ttft)
    if engine is not None and client.ttft_mean_ms is not None:
        out["ttft_gap_ms"] = round(client.ttft_mean_ms - engine, 3)
        out["engine_ttft_ms"] = round(engine, 3)
        out["engine_ttft_from"] = "queue+prefill"
    elif "rest_mean_ms" in ttft:
        out["ttft_gap_ms"] = round(ttft["rest_mean_ms"], 3)
        out["engine_ttft_ms"] = round(ttft["engine"]["mean_ms"], 3)
    if "rest_mean_ms" in tpot:
        out["tpot_gap_ms"] = round(tpot["rest_mean_ms"], 4)
        out["engine_tpot_ms"] = round(tpot["engine"]["mean_ms"], 4)
    return out


def _dropped(kind: str, what: str, shots: list[Shot], ok: list[Shot]) -> dict[str, Any]:
    """A burst that is not kept, and why (the fit's notes say it: a calibration on vLLM lost both request bursts
    to one answer per burst the probe misread, and said only "no burst kept")."""
    first = next((s.error for s in shots if s.error), None) or "no token came back"
    return {"kind": kind, "what": what, "dropped": f"{len(shots) - len(ok)} of {len(shots)} failed ({first})"}


def _requests(probe: Probe, n: int, length: int) -> dict[str, Any] | None:
    """One burst of n `max_tokens` 1 requests of `length` tokens: the span per request and the TTFT gap."""
    specs = [(*probe.prompt(length), 1) for _ in range(n)]
    before = snapshot(probe)
    shots = probe.burst([(p, mt, w) for p, w, mt in specs])
    after = snapshot(probe)
    ok = [s for s in shots if s.error is None and s.e2e_s is not None]
    if len(ok) < n:  # a cut or failed request leaves the process idle for part of the span
        return _dropped("request", f"{n} x {length} tokens", shots, ok)
    t0 = min(s.started for s in ok)
    span = max(s.started + (s.e2e_s or 0.0) for s in ok) - t0
    prompt = statistics.mean(s.prompt_tokens or round(s.words * probe.tokens_per_word) or length for s in ok)
    return {
        "kind": "request",
        "requests": n,
        "prompt_tokens": round(prompt, 1),
        "span_ms": round(1000.0 * span, 3),
        "per_request_ms": round(1000.0 * span / n, 4),
        **engine_gaps(before, after, ok),
    }


def _chunks(probe: Probe, n: int, tokens: int) -> dict[str, Any] | None:
    """n streams of `tokens` tokens at once: chunks written per ms while every stream decodes, and the TPOT gap."""
    specs = [(*probe.prompt(32), tokens) for _ in range(n)]
    before = snapshot(probe)
    shots = probe.burst([(p, mt, w) for p, w, mt in specs], times=True)
    after = snapshot(probe)
    ok = [s for s in shots if s.error is None and s.times]
    if len(ok) < n:
        return _dropped("chunk", f"{n} streams of {tokens} tokens", shots, ok)
    # from the last stream's first chunk (every request's own work done by then) to the last chunk: a saturated
    # process writes nothing but chunks in between, its backlog draining at its rate to the end
    t_all = max(s.times[0] for s in ok if s.times)
    t_end = max(s.times[-1] for s in ok if s.times)
    inside = sum(1 for s in ok for t in s.times or [] if t_all < t <= t_end)
    if inside < 2 * n or t_end <= t_all:
        return None  # the streams' starts took the whole burst: no stretch of chunks alone
    return {
        "kind": "chunk",
        "streams": n,
        "output_tokens": tokens,
        "chunks": inside,
        "window_ms": round(1000.0 * (t_end - t_all), 3),
        "per_chunk_ms": round(1000.0 * (t_end - t_all) / inside, 5),
        **engine_gaps(before, after, ok),
    }


def api_measure(
    probe: Probe, plan: Any, raw: dict[str, Any], key: str, requests: int, streams: int | None = None
) -> None:
    """One round of the API-server bursts (`requests` per burst) into raw[key]: a request burst at each of the
    plan's two prompt lengths, then a chunk burst of `streams` (default the plan's)."""
    out, dropped = raw.setdefault(key, []), raw.setdefault(key + "_dropped", [])
    for length in plan.api_lengths:
        if probe.budget.left() <= 0:
            return
        got = _requests(probe, requests, length)
        if got is not None:
            (dropped if "dropped" in got else out).append(got)
    if probe.budget.left() > 0:
        got = _chunks(probe, streams or plan.api_streams, plan.api_tokens)
        if got is not None:
            (dropped if "dropped" in got else out).append(got)


def api_own(budget_s: float, plan: Any, requests: int, streams: int) -> list[dict[str, Any]] | None:
    """The same bursts on a local simulator without an API-server stage and with an engine too fast to wait for:
    what this machine's HTTP path and our client show as a gap by themselves. None when it cannot start."""
    from vllm_sim.launch import start_simulator

    fast = ["--decode-step-ms", "1", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "1e12"]
    try:
        sim = start_simulator(fast, timeout=max(1.0, min(20.0, budget_s)))
    except (RuntimeError, OSError):
        return None
    try:
        probe = Probe(sim.url, "sim-model", Budget(min(30.0, budget_s)))
        raw: dict[str, Any] = {}
        api_measure(probe, plan, raw, "own", requests, streams)
        return list(raw.get("own") or [])
    finally:
        sim.stop()


def _burst_size(plan: Any, raw: dict[str, Any]) -> int:
    """Requests per burst: the plan's, fewer where the TTFT points say the engine's prefill of them all would
    take over 2 s (a slow engine: the API server is not what waits, and the budget is the engine's)."""
    pts = raw.get("ttft") or []
    if len(pts) >= 2:
        by_len = sorted((p["prompt_tokens"], p["ttft_ms"]) for p in pts)
        (p0, t0), (p1, t1) = by_len[0], by_len[-1]
        if p1 > p0 and t1 > t0:
            per_token_ms = (t1 - t0) / (p1 - p0)
            fit = int(2000.0 / max(per_token_ms * max(plan.api_lengths), 1e-9))
            return max(8, min(int(plan.api_requests), fit))
    return int(plan.api_requests)


def api_phase(probe: Probe, plan: Any, raw: dict[str, Any]) -> None:
    """The API-server phase: this machine's own gaps first (once), then the server's bursts."""
    if probe.budget.left() <= 0:
        return
    n = _burst_size(plan, raw)
    # no more streams than the server's seats: a stream waiting for one is not decoding while the others do
    seats = measured_seats(raw)
    streams = min(plan.api_streams, int(seats)) if seats else plan.api_streams
    if raw.get("api_own") is None:
        raw["api_own"] = api_own(min(30.0, probe.budget.left()), plan, n, streams) or []
    api_measure(probe, plan, raw, "api", n, streams)


# ----------------------------------------------------------------------------------------------------- the fit
