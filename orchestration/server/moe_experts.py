"""The MoE sweep's per-expert load: `vllm:moe_expert_tokens_total{expert}` read from a server's /metrics around
each step (the embedded simulator exports it), and the balance of one step's deltas."""

from __future__ import annotations

import math
import re
from typing import Any

from vllm_users.client import stdlib_http

_EXPERT_RE = re.compile(r"^vllm:moe_expert_tokens_total\{([^}]*)\}\s+([0-9.eE+-]+)", re.M)


def expert_counters(
    host: str, timeout: float = 5.0, headers: dict[str, str] | None = None
) -> dict[str, float] | None:
    """`vllm:moe_expert_tokens_total{expert}` from the server's /metrics (`headers`: the run's credentials); None
    when it has none."""
    import urllib.request

    req = urllib.request.Request(host.rstrip("/") + "/metrics", headers=headers or {})
    try:
        with stdlib_http.urlopen(req, timeout=timeout) as resp:  # interim 1xx skipped
            text = resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    out: dict[str, float] = {}
    for labels, value in _EXPERT_RE.findall(text):
        m = re.search(r'expert="([^"]*)"', labels)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(value)
    return out or None


def expert_balance(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """Per-expert token deltas of one step: max/mean and coefficient of variation (None without counters)."""
    if not after:
        return None
    delta = [after[k] - (before or {}).get(k, 0.0) for k in sorted(after, key=lambda x: (len(x), x))]
    n = len(delta)
    mean = sum(delta) / n
    if mean <= 0:
        return {"experts": n, "tokens": 0.0, "max_over_mean": None, "cv": None}
    std = math.sqrt(sum((d - mean) ** 2 for d in delta) / n)
    return {
        "experts": n,
        "tokens": sum(delta),
        "max_over_mean": max(delta) / mean,
        "cv": std / mean,
        "per_expert": delta,
    }
