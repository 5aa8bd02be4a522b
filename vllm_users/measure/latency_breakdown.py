"""Where a TTFT goes: the server's own latency histograms over the load, beside the client's measured TTFT and TPOT.

vLLM's engine histograms start when a request reaches its engine client, after the API server has parsed the HTTP
request, applied the chat template and tokenised the prompt, and they stop before the token is detokenised, framed
as SSE and written. The client's TTFT covers all of it. Per scraped /metrics URL (each replica's own), over the
load (the sampler's scrape before the first load request to the master's scrape after the drain, as
server_counters.around_load takes the counters):

- queue: `vllm:request_queue_time_seconds` (waiting for a batch slot);
- prefill: `vllm:request_prefill_time_seconds` (scheduled until the first token);
- engine TTFT: `vllm:time_to_first_token_seconds` (arrival at the engine client to the moment the API server's
  output loop handles the first token; queue and prefill are inside it);
- frontend: engine TTFT less queue and prefill, where all three are exported: the part of vLLM's TTFT clock
  outside the engine core (the hand-over to it and back, and the API server's output loop). Queue and prefill are
  stamped by the engine core itself; on an H100 at 1,024 streams they were 0.03 and 42 ms of a 7.3-s "engine"
  TTFT, the rest of it the overloaded API server;
- rest: the client's mean TTFT less the engine's: the API server (HTTP, template, tokenising, one event loop per
  process), the network, and our client;
- our client's part: the workers' event-loop lag (p50 of the worst worker, from the run's health block), which the
  API server's share leaves out: api_server = rest + frontend - loop lag p50 (rest - loop lag p50 without
  the frontend's figure; `api_server_from` says which).

Means come from each histogram's sum and count increases and are exact; a median is the bucket it falls in
(`p50_range_ms`: [lower, upper] ms, as Prometheus' histogram_quantile picks the bucket), never a point interpolated
inside it: a histogram does not know where in its bucket the median lies. TPOT: the client's mean against the
engine's (the first of ENGINE_TPOT the server exports, named in the block). With several URLs each server's rest and
ratios are over the client's requests that server answered (`url_rows`: sent to its host:port, or named by its
`?replica=N` and the records' --replica-header), under its own `client`; a URL the records cannot tell apart has
no ratio at all, never one over another server's requests. Speculative decoding: acceptance rate
= accepted / draft tokens, mean accepted length = 1 + accepted / drafts (the bonus token counted, as vLLM's log
does). A component whose histogram or counter the server does not export is absent, never 0. The client's figures
cover every request of the load, --warmup and --cooldown ones too: the server's window counts them as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from vllm_users.measure.columns import Columns
from vllm_users.measure.groups import rows_by
from vllm_users.measure.metrics import ok_rows, rows, streamed_rows, tpots
from vllm_users.measure.server_counters import LoadCounters, counter_delta, histogram_stats, range_text
from vllm_users.measure.server_metric_names import (
    ENGINE_TPOT,
    ENGINE_TTFT,
    PREFILL_TIME,
    QUEUE_TIME,
    SPEC_ACCEPTED,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
)

__all__ = [
    "APPROXIMATE",
    "FROM_CORE",
    "FROM_TTFT",
    "WINDOW",
    "ClientLatency",
    "breakdown_lines",
    "client_latency",
    "core_ttft_ms",
    "latency_breakdown",
    "primary",
    "server_part",
    "spec_decode",
    "url_rows",
]

FROM_CORE = "client TTFT - queue - prefill (the engine core's stamps) - our loop lag p50"
FROM_TTFT = "client TTFT - engine TTFT - our loop lag p50"
WINDOW = (
    "the load: the scrape before its first request to the one after its drain (warmup and cooldown included)"
)
APPROXIMATE = (
    "means from each histogram's sum/count increases (exact); p50 as the bucket it falls in (p50_range_ms: "
    "lower and upper edge, upper null past the last finite edge)"
)


@dataclass(frozen=True)
class ClientLatency:
    """What our client measured over the load: TTFT and TPOT (ms) and its own event-loop lag."""

    requests: int  # streamed successes (those with a TTFT)
    ttft_mean_ms: float | None
    ttft_p50_ms: float | None
    tpot_mean_ms: float | None
    tpot_p50_ms: float | None
    loop_lag_p50_ms: float | None = None  # the worst worker's
    loop_lag_p99_ms: float | None = None


def client_latency(
    c: Columns, health: Mapping[str, Any] | None, idx: np.ndarray | None = None
) -> ClientLatency:
    """The client's TTFT and TPOT over the rows `idx` of `c` (every row, the load's records, when None) and its
    loop lag from `health`."""
    st = streamed_rows(c, ok_rows(c, rows(c, idx)))
    ttft = c.first_chunk(st).astype(np.float64) / 1e3
    tpot = tpots(c, st)[0] * 1e3
    workers = list(((health or {}).get("workers") or {}).values())

    def worst(key: str) -> float | None:
        vals = [float(w[key]) for w in workers if w.get(key) is not None]
        return max(vals) if vals else None

    return ClientLatency(
        requests=int(st.size),
        ttft_mean_ms=float(ttft.mean()) if ttft.size else None,
        ttft_p50_ms=float(np.median(ttft)) if ttft.size else None,
        tpot_mean_ms=float(tpot.mean()) if tpot.size else None,
        tpot_p50_ms=float(np.median(tpot)) if tpot.size else None,
        loop_lag_p50_ms=worst("loop_lag_p50_ms"),
        loop_lag_p99_ms=worst("loop_lag_p99_ms"),
    )


def _stage(before: Mapping[str, float], after: Mapping[str, float], name: str) -> dict[str, Any] | None:
    st = histogram_stats(dict(before), dict(after), name)
    if st is None:
        return None
    return {"count": st["count"], "mean_ms": st["mean"], "p50_range_ms": st["p50_range"]}


def _host_port(url: str) -> str:
    """A URL's host:port as records name an endpoint (the scheme's default port spelt out)."""
    p = urlsplit(url)
    host = p.hostname or ""
    port = p.port or (443 if p.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def url_rows(c: Columns, url: str, host: str = "") -> np.ndarray | None:
    """The rows of `c` that the server behind the /metrics `url` answered: with several --host URLs, those sent to
    its host:port; with one, every row when `url` is on the run's `host`; of those, with `?replica=N` and records
    that name their replica, the ones replica N answered. None when the records cannot tell (a /metrics elsewhere
    than the one --host, no replica to match)."""
    idx, known = rows(c), False
    where = _host_port(url)
    hosts = rows_by(c, idx, "host")
    if hosts:
        mine = [v for k, v in hosts.items() if k.split("/", 1)[0] == where]
        idx, known = (np.sort(np.concatenate(mine)) if mine else idx[:0]), True
    elif host and "," not in host and not host.startswith("@"):
        known = _host_port(host) == where
    replica = parse_qs(urlsplit(url).query).get("replica")
    if replica and rows_by(c, rows(c), "replica"):
        picked: np.ndarray = rows_by(c, idx, "replica").get(replica[0], np.empty(0, dtype=np.int64))
        return picked
    return idx if known else None


def spec_decode(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float] | None:
    """Speculative decoding over the window: drafts, draft and accepted tokens, acceptance rate, mean accepted
    length; None when the server exports no such counters or drafted nothing."""
    b, a = dict(before), dict(after)
    drafts = counter_delta(b, a, SPEC_DRAFTS)
    drafted = counter_delta(b, a, SPEC_DRAFT_TOKENS)
    accepted = counter_delta(b, a, SPEC_ACCEPTED)
    if accepted is None or not drafted:
        return None
    out = {"draft_tokens": drafted, "accepted_tokens": accepted, "acceptance_rate": accepted / drafted}
    if drafts:
        out["drafts"] = drafts
        out["mean_accepted_length"] = 1.0 + accepted / drafts
    return out


def core_ttft_ms(ttft: Mapping[str, Any]) -> float | None:
    """The engine core's own mean TTFT, queue + prefill (both stamped by the engine core), from a breakdown's
    `ttft` stages; None unless the server exports both."""
    queue, prefill = ttft.get("queue"), ttft.get("prefill")
    if not queue or not prefill:
        return None
    return float(queue["mean_ms"]) + float(prefill["mean_ms"])


def server_part(
    before: Mapping[str, float], after: Mapping[str, float], client: ClientLatency
) -> dict[str, Any]:
    """One server's breakdown over the window between `before` and `after` against the client's figures: its
    stages, the rest up to the client's TTFT, TPOT and speculative decoding; absent parts left out."""
    out: dict[str, Any] = {}
    ttft: dict[str, Any] = {}
    for key, name in (("queue", QUEUE_TIME), ("prefill", PREFILL_TIME), ("engine", ENGINE_TTFT)):
        st = _stage(before, after, name)
        if st is not None:
            ttft[key] = st
    engine, core = ttft.get("engine"), core_ttft_ms(ttft)
    if engine is not None and core is not None:
        ttft["frontend_mean_ms"] = engine["mean_ms"] - core
    if engine is not None and client.ttft_mean_ms is not None:
        rest = client.ttft_mean_ms - engine["mean_ms"]
        ttft["rest_mean_ms"] = rest  # API server + network + our client
        if client.loop_lag_p50_ms is not None:
            api = rest + ttft.get("frontend_mean_ms", 0.0) - client.loop_lag_p50_ms
            ttft["api_server_mean_ms"] = api  # API server + network
            ttft["api_server_from"] = FROM_CORE if "frontend_mean_ms" in ttft else FROM_TTFT
            if client.ttft_mean_ms > 0:
                ttft["api_server_share"] = api / client.ttft_mean_ms
    if ttft:
        out["ttft"] = ttft
    series = next((n for n in ENGINE_TPOT if n + "_count" in after), None)
    tpot_st = _stage(before, after, series) if series else None
    if tpot_st is not None:
        tpot: dict[str, Any] = {"engine": {**tpot_st, "series": series}}
        if client.tpot_mean_ms is not None:
            tpot["rest_mean_ms"] = client.tpot_mean_ms - tpot_st["mean_ms"]
            if tpot_st["mean_ms"] > 0:
                tpot["client_over_engine"] = client.tpot_mean_ms / tpot_st["mean_ms"]
        out["tpot"] = tpot
    spec = spec_decode(before, after)
    if spec is not None:
        out["spec_decode"] = spec
    return out


def _increases(load: LoadCounters) -> dict[str, float]:
    """Every series' increase over the load (a reset counts from 0), as one 'after' against an empty 'before'."""
    out: dict[str, float] = {}
    for k in load.after:
        d = counter_delta(load.before, load.after, k)
        if d is not None:
            out[k] = d
    return out


UNATTRIBUTED = ClientLatency(
    requests=0, ttft_mean_ms=None, ttft_p50_ms=None, tpot_mean_ms=None, tpot_p50_ms=None
)


def latency_breakdown(
    loads: Sequence[LoadCounters],
    client: ClientLatency,
    own: Sequence[ClientLatency | None] = (),
) -> dict[str, Any] | None:
    """result.json's `latency_breakdown`: the client's figures and one entry per scraped URL (their sum as
    `combined` when there are several); None without any scrape around the load. `own[i]`: the client's figures
    over the requests the i-th URL's server answered (url_rows), under that server's `client`; a URL of several
    without them gets no rest and no ratio, never the whole client's against one server's engine."""
    if not loads:
        return None
    servers = []
    for i, ld in enumerate(loads):
        mine = own[i] if i < len(own) else None
        versus = mine if mine is not None else (client if len(loads) == 1 else UNATTRIBUTED)
        entry: dict[str, Any] = {"url": ld.url, **server_part(ld.before, ld.after, versus)}
        if mine is not None and len(loads) > 1:
            entry["client"] = {k: v for k, v in asdict(mine).items() if v is not None}
        servers.append(entry)
    out: dict[str, Any] = {
        "window": WINDOW,
        "note": APPROXIMATE,
        "client": {k: v for k, v in asdict(client).items() if v is not None},
        "servers": servers,
    }
    if len(loads) > 1:  # the replicas' increases summed: one engine behind the client's every request
        total: dict[str, float] = {}
        for ld in loads:
            for k, v in _increases(ld).items():
                total[k] = total.get(k, 0.0) + v
        out["combined"] = server_part({}, total, client)
    return out


def primary(block: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The breakdown a verdict reads: `combined` over several URLs, else the one server's; None without one."""
    if not block:
        return None
    if block.get("combined") is not None:
        return dict(block["combined"])
    servers = block.get("servers") or []
    return dict(servers[0]) if servers else None


# ------------------------------------------------------------------------------- the console's table
_W = 50


def _ms(x: Any) -> str:
    return "-" if x is None else f"{float(x):.1f}"


def _p50(st: Mapping[str, Any]) -> str:
    """The p50 cell of a server's stage: the bucket it falls in ("5-10")."""
    return range_text(st.get("p50_range_ms"))


def _stage_row(label: str, st: Mapping[str, Any] | None) -> str:
    st = st or {}
    return f"  {label:<30}{_ms(st.get('mean_ms')):>9}{_p50(st):>11}"


def _client_rows(client: Mapping[str, Any], label: str = "client") -> list[str]:
    """The client's TTFT and TPOT rows (mean, p50)."""
    return [
        f"  {label + ' ' + m.upper():<30}{_ms(client.get(m + '_mean_ms')):>9}{_ms(client.get(m + '_p50_ms')):>11}"
        for m in ("ttft", "tpot")
    ]


def _server_lines(part: Mapping[str, Any], several: bool) -> list[str]:
    """One server's rows; with `several` servers, first the client's over the requests this one answered, which
    its rest and ratios are against (none where the records cannot tell which requests those were)."""
    head, out = [], []
    if several and part.get("client"):
        head = _client_rows(part["client"], f"  its {part['client'].get('requests', 0)} requests:")
    elif several:
        head = ["  (which requests it answered is unknown: no rest, no ratio)"]
    ttft = part.get("ttft") or {}
    names = (("queue", "queue (engine)"), ("prefill", "prefill (engine)"), ("engine", "engine TTFT"))
    for key, label in names:
        if key in ttft:
            out.append(_stage_row(label, ttft[key]))
    if "frontend_mean_ms" in ttft:
        out.append(f"  {'  of it outside engine core':<30}{_ms(ttft['frontend_mean_ms']):>9}")
    if "rest_mean_ms" in ttft:
        out.append(f"  {'rest: API server + network':<30}{_ms(ttft['rest_mean_ms']):>9}")
    if "api_server_mean_ms" in ttft:
        share = ttft.get("api_server_share")
        tail = f"  {share:.0%} of TTFT" if share is not None else ""
        label = (
            "API server in all, less lag"
            if ttft.get("api_server_from") == FROM_CORE
            else "  less our loop lag p50"
        )
        out.append(f"  {label:<30}{_ms(ttft['api_server_mean_ms']):>9}{'':>11}{tail}")
    tpot = part.get("tpot") or {}
    if "engine" in tpot:
        eng = tpot["engine"]
        ratio = tpot.get("client_over_engine")
        tail = f"  client {ratio:.2f}x" if ratio is not None else ""
        out.append(f"  {'engine TPOT':<30}{_ms(eng.get('mean_ms')):>9}{_p50(eng):>11}{tail}")
    spec = part.get("spec_decode")
    if spec:
        length = spec.get("mean_accepted_length")
        more = f", mean accepted length {length:.2f}" if length is not None else ""
        out.append(f"  speculative decoding: acceptance {spec['acceptance_rate']:.1%}{more}")
    if not out:
        out.append("  (no vLLM latency histogram at this /metrics)")
    return head + out


def breakdown_lines(block: Mapping[str, Any] | None) -> list[str]:
    """The console's table of where a TTFT goes: the client's figures, then each scraped server's; [] without."""
    if not block:
        return []
    client = block.get("client") or {}
    out = [f"{' Where a TTFT goes (ms) ':-^{_W}}", f"  {'':<30}{'mean':>9}{'p50':>11}"]
    out += _client_rows(client)
    if client.get("loop_lag_p50_ms") is not None:
        out.append(
            f"  {'our loop lag p50 / p99':<30}{_ms(client['loop_lag_p50_ms']):>9}"
            f"{_ms(client.get('loop_lag_p99_ms')):>11}"
        )
    servers = block.get("servers") or []
    for s in servers:
        out.append(f"server {s.get('url')}:" if len(servers) > 1 else f"server ({s.get('url')}):")
        out.extend(_server_lines(s, len(servers) > 1))
    if block.get("combined"):
        out.append("all servers together:")
        out.extend(_server_lines(block["combined"], False))
    out.append("  (engine p50: the histogram bucket it falls in; engine means exact)")
    return out
