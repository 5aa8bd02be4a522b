"""What a run's result must say in words beyond its figures: why a run that completed no request failed, and the
prompt-length calibration's warning. Free of Locust (the CLI prints them too)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_users.measure.run_result import RunResult

__all__ = ["calibration_warning", "no_completed_reason"]


def no_completed_reason(res: RunResult) -> str | None:
    """Why a run that completed no request failed, in one line (None: some request completed)."""
    if res.completed:
        return None
    if res.failed:
        kinds = ", ".join(f"{k}={v}" for k, v in sorted((res.metric("errors_by_kind") or {}).items()))
        return f"no request completed: all {res.failed} failed ({kinds or 'see the records'})"
    windows = res.metric("windows") or {}
    left_out = {k: int((windows.get(k) or {}).get("requests") or 0) for k in ("warmup", "cooldown")}
    if any(left_out.values()):  # the requests were sent, and the windows took every one of them
        said = " and ".join(f"--{k} {windows[k].get('spec', '')} took {n}" for k, n in left_out.items() if n)
        return (
            f"no request completed in the measured window: {said} of the {sum(left_out.values())} sent "
            "(a shorter --warmup/--cooldown, or more requests)"
        )
    interrupted = int(res.metric("interrupted") or 0)
    if interrupted:
        return (
            f"no request completed: the {interrupted} sent were still streaming when the run ended "
            "(a longer --run-time, or a lower --output-len)"
        )
    return "no request completed: no load request was sent (see the workers' logs in the run directory)"


def calibration_warning(meta: Mapping[str, Any]) -> str | None:
    """The prompt-length calibration's warning (rejected or cut short), for the result's warnings."""
    cal = meta.get("prompt_calibration")
    w = cal.get("warning") if isinstance(cal, dict) else None
    return str(w) if w else None
