"""Warm-up and cool-down windows (`--warmup 30s|200r`, `--cooldown 30s|200r`): which requests the statistics leave out.

The records keep every request; the windows are decided from the records alone, so the master, the report
and a re-run of `vllm-locust report` flag the same requests:

- warm-up `Ns`: requests that started within N s of the run's first start; `Nr`: the first N requests by start.
- cool-down `Ns`: requests that ended within N s of the run's last end; `Nr`: the last N requests by end.

A request in both is counted as warm-up. Everything else is the measured window: every statistic, the
duration and the throughputs come from it alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_users.measure.columns import Columns
from vllm_users.measure.metrics import request_spans

MEASURED, WARMUP, COOLDOWN = 0, 1, 2
PHASE_NAMES = ("measured", "warmup", "cooldown")
_SPEC = re.compile(r"^\s*(?:(?P<count>\d+)\s*r|(?P<time>(?:\d+(?:\.\d+)?\s*[hms]?\s*)+))\s*$", re.IGNORECASE)
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([hms]?)", re.IGNORECASE)
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "": 1.0}


@dataclass(frozen=True)
class Window:
    """A window length: `seconds` of time or `requests` by count (exactly one is set)."""

    text: str
    seconds: float | None = None
    requests: int | None = None

    @classmethod
    def parse(cls, text: str) -> Window:
        """`30s`, `5m`, `1m30s` (time) or `200r` (requests); ValueError naming the text otherwise."""
        m = _SPEC.match(text or "")
        if not m:
            raise ValueError(f"{text!r} is not a window like 30s, 2m or 200r")
        if m.group("count") is not None:
            return cls(text.strip(), requests=int(m.group("count")))
        secs = sum(float(v) * _UNIT_S[u.lower()] for v, u in _PART.findall(m.group("time")))
        return cls(text.strip(), seconds=secs)

    @property
    def empty(self) -> bool:
        """True when the window holds nothing (0s, 0r)."""
        return not (self.seconds or self.requests)


def parse_optional(text: str | None) -> Window | None:
    """Window.parse, or None for an empty/absent spec."""
    if not text:
        return None
    w = Window.parse(str(text))
    return None if w.empty else w


def phases(c: Columns, idx: np.ndarray, warmup: Window | None, cooldown: Window | None) -> np.ndarray:
    """Per row of `idx`: MEASURED, WARMUP or COOLDOWN."""
    out = np.full(idx.size, MEASURED, dtype=np.int8)
    if not idx.size:
        return out
    starts, ends = request_spans(c, idx)
    if cooldown is not None:
        if cooldown.seconds is not None:
            out[ends > ends.max() - cooldown.seconds] = COOLDOWN
        elif cooldown.requests:
            out[np.argsort(ends, kind="stable")[::-1][: cooldown.requests]] = COOLDOWN
    if warmup is not None:
        if warmup.seconds is not None:
            out[starts < starts.min() + warmup.seconds] = WARMUP
        elif warmup.requests:
            out[np.argsort(starts, kind="stable")[: warmup.requests]] = WARMUP
    return out


def split(
    c: Columns, idx: np.ndarray, warmup: Window | None, cooldown: Window | None
) -> tuple[np.ndarray, dict[str, Any] | None]:
    """The measured rows of `idx`, and the `windows` block of the result (None when no window was asked)."""
    if warmup is None and cooldown is None:
        return idx, None
    ph = phases(c, idx, warmup, cooldown)
    starts, ends = request_spans(c, idx)
    t0 = float(starts.min()) if idx.size else 0.0
    block: dict[str, Any] = {"measured": _span(ph == MEASURED, starts, ends, t0)}
    for name, code, w in (("warmup", WARMUP, warmup), ("cooldown", COOLDOWN, cooldown)):
        if w is not None:
            block[name] = {"spec": w.text, **_span(ph == code, starts, ends, t0)}
    if idx.size and not block["measured"]["requests"]:  # no record at all is not the windows' doing
        block["warning"] = (
            f"the warm-up and cool-down windows hold all {idx.size} requests: nothing was measured"
        )
    return idx[ph == MEASURED], block


def _span(mask: np.ndarray, starts: np.ndarray, ends: np.ndarray, t0: float) -> dict[str, Any]:
    """Count and time span (s from the first start; epoch too) of the rows in `mask`."""
    if not mask.any():
        return {"requests": 0, "start_s": None, "end_s": None}
    s, e = float(starts[mask].min()), float(ends[mask].max())
    return {
        "requests": int(mask.sum()),
        "start_s": round(s - t0, 6),
        "end_s": round(e - t0, 6),
        "start": s,
        "end": e,
    }
