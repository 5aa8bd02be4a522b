"""What a run's result must say in words beyond its figures: why a run that completed no request failed, the
prompt-length calibration's warning, and a dataset smaller than the requests sent. Free of Locust (the CLI prints
them too)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.measure.run_result import RunResult

__all__ = ["calibration_warning", "dataset_reuse_note", "no_completed_reason"]


def no_completed_reason(res: RunResult) -> str | None:
    """Why a run that completed no request failed, in one line (None: some request completed)."""
    if res.completed:
        return None
    if res.failed:
        kinds = ", ".join(f"{k}={v}" for k, v in sorted((res.metric(K.ERRORS_BY_KIND) or {}).items()))
        return f"no request completed: all {res.failed} failed ({kinds or 'see the records'})"
    windows = res.metric(K.WINDOWS) or {}
    left_out = {k: int((windows.get(k) or {}).get("requests") or 0) for k in ("warmup", "cooldown")}
    if any(left_out.values()):  # the requests were sent, and the windows took every one of them
        said = " and ".join(f"--{k} {windows[k].get('spec', '')} took {n}" for k, n in left_out.items() if n)
        return (
            f"no request completed in the measured window: {said} of the {sum(left_out.values())} sent "
            "(a shorter --warmup/--cooldown, or more requests)"
        )
    interrupted = int(res.metric(K.INTERRUPTED) or 0)
    if interrupted:
        return (
            f"no request completed: the {interrupted} sent were still streaming when the run ended "
            "(a longer --run-time, or a lower --output-len)"
        )
    return f"no request completed: {_why_nothing_recorded(res)}"


def _why_nothing_recorded(res: RunResult) -> str:
    """A run without a single record: whether anything was sent, as far as the evidence goes. "no load request was
    sent" only where the server's own count says so; lost records and dropped arrivals are named."""
    arrivals = res.metric(K.ARRIVALS) or {}
    if arrivals.get("dropped") and not arrivals.get("sent"):
        return (
            f"no load request was sent: all {arrivals['dropped']} scheduled arrivals were dropped "
            "(no free user, or --max-concurrency slot, before the run ended)"
        )
    lost = [w.get("worker") for w in (res.data_loss or {}).get("workers_lost") or []]
    if res.missing_vs_server:
        where = f" (worker(s) lost: {', '.join(map(str, lost))})" if lost else ""
        return (
            f"no load request was recorded, though the server served {res.missing_vs_server}: their records "
            f"never reached the master{where}; see the workers' logs in the run directory"
        )
    if lost:
        return (
            f"no load request was recorded: worker(s) {', '.join(map(str, lost))} lost before their records "
            "arrived; see the workers' logs in the run directory"
        )
    if res.server_served is not None:  # the server's count over the load agrees: nothing reached it
        return "no load request was sent (see the workers' logs in the run directory)"
    return (
        "no load request was recorded, and the server's count is unknown (see the workers' logs in the run "
        "directory)"
    )


def calibration_warning(meta: Mapping[str, Any]) -> str | None:
    """The prompt-length calibration's warning (rejected or cut short), for the result's warnings."""
    cal = meta.get("prompt_calibration")
    w = cal.get("warning") if isinstance(cal, dict) else None
    return str(w) if w else None


def dataset_reuse_note(
    dataset: str, entries: int, requests: int, cache_hits: tuple[float, str] | None
) -> str | None:
    """The note for a --dataset of fewer prompts than the run sent requests: each prompt went out
    requests / entries times, and every resend after the first can be answered from the server's prefix cache,
    so TTFT is lower than for new prompts; with the cache's measured share of prompt tokens (`cache_hits`:
    server_counters.prompt_cache_hits). None when every request had a prompt of its own."""
    if entries <= 0 or requests <= entries:
        return None
    effect = (
        f"; {cache_hits[0]:.1%} of the prompt tokens came from the server's prefix cache ({cache_hits[1]})"
        if cache_hits is not None
        else "; the server's prefix-cache hits are unknown (no counters, no cached_tokens)"
    )
    return (
        f"DATASET REUSED: {dataset} has {entries} prompts for {requests} requests, so each prompt was sent "
        f"{requests / entries:.1f} times on average{effect}; a resent prompt's prefill can come from the cache, "
        f"so TTFT is lower than for new prompts. Use a dataset of at least {requests} prompts, or "
        f"--num-prompts {entries}"
    )
