"""Figures per session of session graphs (a trace's sessions, `--scenario agent`'s): how many completed, were cut
or failed, their calls and durations, from the run's records and the calls each session makes.

A session is the calls of one ticket (records share its `session`, the ticket's index). Of the sessions given
(a trace's window; the synthetic agents' sessions that started):
- `completed`: every call answered;
- `failed`: a call failed (an error other than the run's own interruption), which ends the session there;
- `cut`: started, not completed and not failed: the run ended while it was open (a call interrupted, or calls
  never sent); its finished calls count in every other figure as any call does;
- `not_started`: no call was sent (the run ended first, or its first call was dropped).
`calls_per_session` counts the calls sent by each started session (`mean`, `p50`, `max`);
`duration_s` is, for each completed session, the time from its first call's send to its last call's end
(`mean`, `p50`, `p90`, `p99`, `max`); None when no session completed. Computed by the master from all of the
run's records (result.json's `sessions`, `distributed/run_end.py`); absent for a run without sessions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vllm_users.measure.columns import Records, as_columns
from vllm_users.measure.metrics import ok_rows, request_spans, sent_rows

__all__ = ["DURATION_PERCENTILES", "session_metrics"]

DURATION_PERCENTILES = (50, 90, 99)


def session_metrics(records: Records, expected: Mapping[int, int]) -> dict[str, Any] | None:
    """The sessions block of a replay: `expected` maps each session's entry index to the calls it makes; None
    when there is no session."""
    if not expected:
        return None
    c = as_columns(records)
    every = np.arange(c.n, dtype=np.int64)
    sent = sent_rows(c, every)
    session = c.a["session"]
    ours = sent[np.isin(session[sent], np.fromiter(expected, dtype=np.int64, count=len(expected)))]
    ok = ok_rows(c, ours)
    interrupted = c.code("error", "interrupted")
    errors = c.a["error"][ours]
    failed_rows = ours[(errors != c.code("error", None)) & (errors != interrupted)]
    calls = np.bincount(session[ours]) if ours.size else np.zeros(0, np.int64)
    answered = np.bincount(session[ok], minlength=calls.size) if ok.size else np.zeros(calls.size, np.int64)
    failed = set(session[failed_rows].tolist())
    completed: list[int] = []
    cut = 0
    started = [s for s in expected if s < calls.size and calls[s] > 0]
    for s in started:
        if s in failed:
            continue
        if answered[s] >= expected[s]:
            completed.append(s)
        else:
            cut += 1
    durations = _durations(c, ok, completed)
    per = np.array([calls[s] for s in started], dtype=np.float64)
    return {
        "sessions": len(expected),
        "completed": len(completed),
        "cut": cut,
        "failed": len(failed & set(started)),
        "not_started": len(expected) - len(started),
        "calls_per_session": None
        if not per.size
        else {"mean": float(per.mean()), "p50": float(np.percentile(per, 50)), "max": int(per.max())},
        "duration_s": durations,
    }


def _durations(c: Any, ok: np.ndarray, completed: list[int]) -> dict[str, float] | None:
    """First send to last end of each completed session: mean, percentiles and max (s); None for none."""
    if not completed:
        return None
    starts, ends = request_spans(c, ok)
    session = c.a["session"][ok]
    keep = np.isin(session, np.array(completed, dtype=np.int64))
    order = np.argsort(session[keep], kind="stable")
    s, a, b = session[keep][order], starts[keep][order], ends[keep][order]
    cuts = np.flatnonzero(np.diff(s)) + 1
    spans = np.array([e.max() - f.min() for f, e in zip(np.split(a, cuts), np.split(b, cuts), strict=True)])
    out = {
        f"p{p}": float(v)
        for p, v in zip(DURATION_PERCENTILES, np.percentile(spans, DURATION_PERCENTILES), strict=True)
    }
    out.update(mean=float(spans.mean()), max=float(spans.max()))
    return out
