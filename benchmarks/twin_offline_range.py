"""The twin's find-max-rate answer as a range: the fit's uncertainties carried through the twin's own search
(benchmarks/twin_offline.py).

Each fitted constant with an uncertainty is moved by it, down and up (one at a time, the others as fitted), and the
twin's search is run again on the same seed; the answer's shifts below and above are summed in quadrature (the
constants' errors taken as independent). A search answers within its bracket and its path: the same twin on
other seeds moved the H100 twin's answer by up to ~10 %, so the range holds those answers too. A constant whose uncertainty is as large as its value is "not
resolved": the fit table says so (profile.fit_table), and so does the range here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["MOVED", "answer_range", "unresolved"]

# the constants a search's answer rests on (the limits the server shows have no uncertainty to carry)
MOVED = (
    "decode_step_ms",
    "decode_per_seq_ms",
    "decode_per_ctx_token_us",
    "prefill_tokens_per_s",
    "prefill_per_ctx_token_ns",
    "request_overhead_ms",
    "api_request_cost_us",
    "api_prompt_token_cost_us",
    "api_chunk_cost_us",
)


def unresolved(c: dict[str, dict[str, Any]]) -> list[str]:
    """The fitted constants whose uncertainty is as large as their value (above 0)."""
    out = []
    for name in MOVED:
        e = c.get(name) or {}
        u, v = e.get("uncertainty"), e.get("value")
        if e.get("source") in ("fit", "burst") and u is not None and v is not None and u >= abs(v) and u > 0:
            out.append(name)
    return out


def answer_range(
    c: dict[str, dict[str, Any]],
    answer: float,
    search: Callable[[dict[str, dict[str, Any]]], float | None],
    seeds: list[float] | None = None,
) -> dict[str, Any]:
    """[low, high] of the twin's answer `answer` over the constants' uncertainties, widened to hold `seeds` (the
    same twin's answers on other seeds: the search's own spread); `search(constants)` is the twin's answer with
    other constants. A search that finds no passing rate counts as 0 req/s."""
    below, above, shifts = 0.0, 0.0, {}
    for name in MOVED:
        e = c.get(name) or {}
        u, v = e.get("uncertainty"), e.get("value")
        if not u or v is None or e.get("source") not in ("fit", "burst"):
            continue
        got = []
        for sign in (-1.0, 1.0):
            moved = max(float(v) + sign * float(u), 0.0)
            if name == "prefill_tokens_per_s" and moved <= 0:
                moved = float(v) / 10.0  # a rate cannot reach 0: a tenth of it stands for "far slower"
            got.append(search({**c, name: {**e, "value": moved}}) or 0.0)
        shifts[name] = [round(g - answer, 3) for g in got]
        below += sum(min(g - answer, 0.0) ** 2 for g in got)
        above += sum(max(g - answer, 0.0) ** 2 for g in got)
    spread = seeds or []
    return {
        "low": min([answer - math.sqrt(below), *spread]),
        "high": max([answer + math.sqrt(above), *spread]),
        "seeds": spread,
        "shifts": shifts,
        "unresolved": unresolved(c),
    }
