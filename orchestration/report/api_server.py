"""The diagnosis of where a TTFT goes (result.json's `latency_breakdown`, vllm_users.measure.latency_breakdown).

The rule `api_server_bound` fires when the part of the client's mean TTFT that vLLM's engine histograms do not
see, less our client's own loop lag (the API server and the network: vllm_users.measure.latency_breakdown),
is most of it and more than a floor of milliseconds: tuning the engine cannot shorten that part.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestration.report.findings import Finding
from orchestration.report.postprocess import RunData
from vllm_users.measure.latency_breakdown import primary

__all__ = ["API_SERVER_MIN_MS", "API_SERVER_SHARE_MIN", "api_server_bound"]

API_SERVER_SHARE_MIN = 0.50  # the API server and network take more than half of the client's mean TTFT...
API_SERVER_MIN_MS = 20.0  # ...and more than this (a few ms of HTTP on a 5 ms TTFT is nothing to tune)


def api_server_bound(run: RunData) -> list[Finding]:
    """A warning when the API server and network take most of the client's mean TTFT (beyond a floor)."""
    res = run.result
    if res.get("client_bound"):  # our client was the bottleneck: its own finding says so, this one would not
        return []
    block = res.get("latency_breakdown")
    part = primary(block)
    ttft = (part or {}).get("ttft") or {}
    api, share = ttft.get("api_server_mean_ms"), ttft.get("api_server_share")
    if api is None or share is None or api <= API_SERVER_MIN_MS or share <= API_SERVER_SHARE_MIN:
        return []
    client = (block or {}).get("client") or {}
    engine = ttft.get("engine") or {}
    stages = ", ".join(
        f"{k} {ttft[k]['mean_ms']:.1f} ms" for k in ("queue", "prefill") if isinstance(ttft.get(k), Mapping)
    )
    tpot = (part or {}).get("tpot") or {}
    tpot_text = (
        f"; client TPOT {tpot['client_over_engine']:.2f}x the engine's"
        if "client_over_engine" in tpot
        else ""
    )
    evidence = (
        f"client mean TTFT {client.get('ttft_mean_ms', 0.0):.1f} ms; engine TTFT {engine.get('mean_ms', 0.0):.1f} ms"
        + (f" ({stages})" if stages else "")
        + f"; the rest {ttft.get('rest_mean_ms', 0.0):.1f} ms, of which our loop lag p50 "
        f"{client.get('loop_lag_p50_ms', 0.0):.1f} ms: API server + network {api:.1f} ms = {share:.0%}{tpot_text}"
    )
    return [
        Finding(
            "api_server_bound",
            run.name,
            "warning",
            "Most of the TTFT is spent outside the engine: vLLM's API server",
            f"client TTFT - engine TTFT - our loop lag > {API_SERVER_SHARE_MIN:.0%} of the client's TTFT "
            f"and > {API_SERVER_MIN_MS:g} ms",
            evidence,
            "Run more API-server processes (`vllm serve ... --api-server-count N`: each has its own event "
            "loop, HTTP parsing, chat template and tokeniser); engine tuning (batch size, chunked prefill, "
            "--max-num-seqs) will not shorten this part. If the client is far from the server, measure once "
            "from beside it: the network is in this part too.",
        )
    ]
