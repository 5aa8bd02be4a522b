"""The diagnosis of where a TTFT goes (result.json's `latency_breakdown`, vllm_users.measure.latency_breakdown).

The rule `api_server_bound` fires when the part of the client's mean TTFT that vLLM's engine core does not see
(outside its queue and prefill, which the engine core stamps itself; outside vLLM's TTFT histogram where those two
are not exported), less our client's own loop lag (the API server and the network:
vllm_users.measure.latency_breakdown), is most of it and more than a floor of milliseconds, or when the client's
TPOT is well above the engine's (the network adds little to a token's gap once a stream flows; one API-server event loop framing every stream's tokens
does): tuning the engine cannot shorten that part.
"""

from __future__ import annotations

from orchestration.report.findings import Finding
from orchestration.report.postprocess import RunData
from vllm_users.measure.latency_breakdown import primary

__all__ = [
    "API_SERVER_MIN_MS",
    "API_SERVER_SHARE_MIN",
    "TPOT_EXTRA_MIN_MS",
    "TPOT_OVER_ENGINE_MIN",
    "api_server_bound",
]

API_SERVER_SHARE_MIN = 0.50  # the API server and network take more than half of the client's mean TTFT...
API_SERVER_MIN_MS = 20.0  # ...and more than this (a few ms of HTTP on a 5 ms TTFT is nothing to tune)
TPOT_OVER_ENGINE_MIN = 1.5  # or the client's mean TPOT is at least this multiple of the engine's...
TPOT_EXTRA_MIN_MS = 2.0  # ...and at least this many ms per token above it


def api_server_bound(run: RunData) -> list[Finding]:
    """A warning when the API server and network take most of the client's mean TTFT (beyond a floor), or the
    client's TPOT is well above the engine's."""
    res = run.result
    if res.get("client_bound"):  # our client was the bottleneck: its own finding says so, this one would not
        return []
    block = res.get("latency_breakdown")
    part = primary(block)
    ttft = (part or {}).get("ttft") or {}
    api, share = ttft.get("api_server_mean_ms"), ttft.get("api_server_share")
    by_ttft = (
        api is not None and share is not None and api > API_SERVER_MIN_MS and share > API_SERVER_SHARE_MIN
    )
    tpot = (part or {}).get("tpot") or {}
    ratio, extra = tpot.get("client_over_engine"), tpot.get("rest_mean_ms")
    by_tpot = (
        ratio is not None
        and extra is not None
        and ratio >= TPOT_OVER_ENGINE_MIN
        and extra >= TPOT_EXTRA_MIN_MS
    )
    if not (by_ttft or by_tpot):
        return []
    client = (block or {}).get("client") or {}
    said = []
    if client.get("ttft_mean_ms") is not None:
        said.append(f"client mean TTFT {client['ttft_mean_ms']:.1f} ms")
    engine = ttft.get("engine") or {}
    if engine:
        stages = ", ".join(f"{k} {ttft[k]['mean_ms']:.1f} ms" for k in ("queue", "prefill") if ttft.get(k))
        said.append(f"engine TTFT {engine['mean_ms']:.1f} ms" + (f" ({stages})" if stages else ""))
    if api is not None and share is not None:
        outside = f"the rest {ttft['rest_mean_ms']:.1f} ms"
        if ttft.get("frontend_mean_ms") is not None:  # the engine core's own stamps: queue + prefill
            outside += f" and {ttft['frontend_mean_ms']:.1f} ms of the engine TTFT outside the engine core"
        said.append(
            f"{outside}, less our loop lag p50 {client['loop_lag_p50_ms']:.1f} ms: API server + network "
            f"{api:.1f} ms = {share:.0%}"
        )
    if ratio is not None:
        eng = tpot["engine"]
        said.append(
            f"client mean TPOT {ratio:.2f}x the engine's ({eng.get('series')}: {eng['mean_ms']:.2f} ms)"
        )
    evidence = "; ".join(said)
    return [
        Finding(
            "api_server_bound",
            run.name,
            "warning",
            "Time spent outside the engine: vLLM's API server (or the network)",
            f"client TTFT - engine TTFT (its queue + prefill where exported) - our loop lag > "
            f"{API_SERVER_SHARE_MIN:.0%} of the client's TTFT "
            f"and > {API_SERVER_MIN_MS:g} ms, or client TPOT >= {TPOT_OVER_ENGINE_MIN:g} x the engine's and "
            f">= {TPOT_EXTRA_MIN_MS:g} ms above it",
            evidence,
            "Run more API-server processes (`vllm serve ... --api-server-count N`: each has its own event "
            "loop, HTTP parsing, chat template and tokeniser); engine tuning (batch size, chunked prefill, "
            "--max-num-seqs) will not shorten this part. If the client is far from the server, measure once "
            "from beside it: the network is in this part too.",
        )
    ]
