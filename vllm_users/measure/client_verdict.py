"""Which cause delayed a worker: our CPU saturated, our code blocking the loop, or other load on the machine.

One function decides (`classify`), from one worker's health row (`health.summarize`): the console summary, the
web UI's LLM tab and the report's diagnosis all print its verdict, in the same words (`TEXT`, `ADVICE`).
Only the first two causes make a run client-bound; a busy machine delays the numbers as much, but neither more
workers nor a faster client would remove that delay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

# Thresholds (documented in docs/metrics.md and README.md).
CPU_BOUND_FRACTION = 0.90  # mean CPU of one worker process over the run, of one core
# p99 of the extra delay of a 50 ms gevent sleep. 10 ms: the open-loop "late" threshold (metrics.LATE_THRESHOLD_S),
# and measured: at loop-lag p99 11 ms (256 streams) our TTFT p99 error was +10.4 ms; the lag reaches the tail 1:1.
LOOP_LAG_P99_MS = 10.0
# Of the loop lag in probes over 5 ms, at least this share spent waiting for a CPU (the kernel's run-queue wait of
# the loop's thread): the machine's lag (other processes held the cores), not our code's. Half: whichever cause
# held the loop longer. Recorded (tests/data/health_cases.json; a 2-core machine shared with other work, 3-4 runs
# each): a busy handler 0.12-0.23, a blocking call 0.01 and saturating greenlets 0.15-0.25 in our process; two
# processes spinning on the worker's core 1.00. A vision run beside a vLLM server (other load) read 0.80.
RUNQ_SHARE_BUSY = 0.5
# Shorter than this, a run is too short to judge: a worker's CPU over less of a run is absent (not 0), and its loop
# lag is not judged on probes that cover less ("too short to judge").
MIN_JUDGE_S = 1.0

Verdict = Literal["cpu_saturated", "loop_blocked", "machine_busy", "loop_lag", "too_short", "ok"]
# most severe first: a run's verdict is its workers' most severe
ORDER: tuple[Verdict, ...] = ("cpu_saturated", "loop_blocked", "machine_busy", "loop_lag", "too_short", "ok")
CLIENT_BOUND: frozenset[str] = frozenset({"cpu_saturated", "loop_blocked"})
UNKNOWN: frozenset[str] = frozenset({"loop_lag", "too_short"})  # client_bound is unknown (None)

NOT_MEASURED = "not measured (no worker reported its health)"
TEXT: dict[str, str] = {
    "cpu_saturated": "CLIENT-BOUND: our CPU is saturated",
    "loop_blocked": "CLIENT-BOUND: our code blocks the event loop",
    "machine_busy": "MACHINE BUSY: other load on this host",
    "loop_lag": "LOOP LAG: cause unknown",
    "too_short": "too short to judge",
    "ok": "ok",
}
ADVICE: dict[str, str] = {
    "cpu_saturated": "latencies include client delay; add workers (--workers, one per core) or machines, or "
    "lower the load per worker",
    "loop_blocked": "latencies include client delay; something in our process (user code, the locustfile: a "
    "blocking call, time.sleep, file I/O, heavy work in a handler) holds the event loop; more workers will not "
    "remove it",
    "machine_busy": "latencies include delay caused by other load on this host (the worker waited for a CPU); "
    "free the machine (other processes, or more workers than free cores) or move the client",
    "loop_lag": "latencies include event-loop delay; this kernel does not say whether our code or other load "
    "on the host held the loop (no /proc/thread-self/schedstat)",
    "too_short": "the run was too short to judge the client's CPU or loop lag",
    "ok": "",
}


def classify(row: Mapping[str, Any]) -> Verdict:
    """One worker's verdict from its evidence (None or absent: not measured): cpu_mean, loop_busy_share,
    loop_lag_p99_ms over loop_lag_span_s, lag_runq_share."""
    cpu = row.get("cpu_mean")
    lag = row.get("loop_lag_p99_ms")
    span = row.get("loop_lag_span_s")
    if span is not None and span < MIN_JUDGE_S:
        lag = None
    share = row.get("lag_runq_share")
    machine = share is not None and share >= RUNQ_SHARE_BUSY  # the lag was mostly waiting for a CPU
    busy = row.get("loop_busy_share")
    # saturated: a core's worth of CPU, or (on a shared core, where less was to be had) a loop thread never idle,
    # on a CPU or waiting for one, while the lag was its own work's: enough on its own, however short the run
    if (cpu is not None and cpu > CPU_BOUND_FRACTION) or (
        busy is not None and busy > CPU_BOUND_FRACTION and not machine
    ):
        return "cpu_saturated"
    if lag is None:
        return "too_short"
    if lag > LOOP_LAG_P99_MS:
        if share is None:  # lag over 5 ms was seen, so None means the kernel gave no run-queue figures
            return "loop_lag"
        return "machine_busy" if machine else "loop_blocked"
    return "too_short" if cpu is None else "ok"


def overall(verdicts: Iterable[str]) -> str | None:
    """The run's verdict: its workers' most severe; None when no worker reported."""
    seen = set(verdicts)
    return next((v for v in ORDER if v in seen), None)


def client_bound_of(verdicts: Iterable[str]) -> bool | None:
    """True when a worker was client-bound, False when every worker was judged otherwise, None when unknown."""
    seen = set(verdicts)
    if seen & CLIENT_BOUND:
        return True
    if not seen or seen & UNKNOWN:
        return None
    return False


def line(verdict: str | None) -> str:
    """The verdict in words, with what to do (the console summary's and the report's wording)."""
    if verdict is None:
        return NOT_MEASURED
    advice = ADVICE.get(verdict, "")
    return f"{TEXT[verdict]}: {advice}" if advice and verdict != "too_short" else TEXT[verdict]


def verdict_of(health: Mapping[str, Any]) -> str | None:
    """A run's verdict from its client_health block: as the run decided it, or (a result written before verdicts
    were kept) from its workers' recorded evidence."""
    if "verdict" in health:
        return None if health["verdict"] is None else str(health["verdict"])
    return overall(classify(w) for w in (health.get("workers") or {}).values())


def worst_worker(health: Mapping[str, Any], verdict: str | None) -> tuple[str, Mapping[str, Any]] | None:
    """The worker whose verdict is the run's (the one with the longest loop lag among them), with its row."""
    rows = [
        (n, w)
        for n, w in (health.get("workers") or {}).items()
        if (w.get("verdict") or classify(w)) == verdict
    ]
    return max(rows, key=lambda nw: nw[1].get("loop_lag_p99_ms") or 0.0) if rows else None


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _secs(x: Any) -> str:
    return "n/a" if x is None else f"{x:.1f} s"


def evidence(row: Mapping[str, Any], verdict: str) -> str:
    """The figures behind one worker's verdict, in words."""
    cpu = f"CPU {_pct(row.get('cpu_mean'))} of a core"
    lag = row.get("loop_lag_p99_ms")
    lag_text = "loop lag p99 n/a" if lag is None else f"loop lag p99 {lag:.1f} ms"
    share = row.get("lag_runq_share")
    waited = "" if share is None else f", {share:.0%} of that lag waiting for a CPU"
    busy = row.get("loop_busy_share")
    if verdict == "cpu_saturated" and busy is not None:
        return f"{cpu}, its loop thread on a CPU or waiting for one {busy:.0%} of the run; {lag_text}{waited}"
    if verdict == "too_short":
        span = row.get("loop_lag_span_s")
        probed = "loop lag not probed" if span is None else f"loop lag probed over {span:.1f} s"
        return f"{cpu} over {_secs(row.get('run_s'))}; {probed} (judged from {MIN_JUDGE_S:g} s)"
    return f"{cpu}; {lag_text}{waited}"
