"""When the server could not be reached: the stretches of a run in which every request, one after another by
start time, ended in a refused or reset connection (`connection`), each from its first failure's start to its
last one's end. result.json's `server_unreachable` and the summary's "Server unreachable" line."""

from __future__ import annotations

from typing import Any

import numpy as np

from vllm_users.measure.columns import Columns

__all__ = ["MIN_S", "unreachable_spans"]

MIN_S = 1.0  # shorter stretches are a blip (a reset connection or two), not a server gone away


def unreachable_spans(c: Columns, sent: np.ndarray, t0: float) -> list[dict[str, Any]]:
    """Each stretch of `sent` (rows) of connection failures only, at least MIN_S long: `from_s` (since `t0`, the
    first request's start), `for_s`, `failures`, and `until_s` or, when the run ended in it, `to_end: True`."""
    code = c.code("error", "connection")
    if code < 0 or not sent.size:
        return []
    order = sent[np.argsort(c.a["t_start"][sent], kind="stable")]
    down = c.a["error"][order] == code
    if not down.any():
        return []
    edges = np.diff(np.concatenate(([0], down.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # [start, stop) runs of failures
    t_start = c.a["t_start"][order]
    t_end = t_start + c.a["end_us"][order] / 1e6
    out: list[dict[str, Any]] = []
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        begin, end = float(t_start[a]), float(t_end[a:b].max())
        if end - begin < MIN_S:
            continue
        span: dict[str, Any] = {
            "from_s": round(begin - t0, 3),
            "for_s": round(end - begin, 3),
            "failures": b - a,
        }
        if b == order.size:
            span["to_end"] = True  # no request reached the server again before the run ended
        out.append(span)
    return out
