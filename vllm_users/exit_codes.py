"""Exit codes of `vllm-locust`, in one place (README "Exit codes" mirrors this table)."""

from __future__ import annotations

OK = 0  # the run completed and every request succeeded
FAILURES = 1  # the run completed; some requests failed (see errors_by_kind)
USAGE = 2  # bad flag, config file or dataset: nothing was sent
PREFLIGHT = 3  # server unreachable, not OpenAI-compatible, wrong model or API key: nothing was sent
SCHEDULE = 4  # open loop: scheduled arrivals were dropped (the offered load was not delivered)
CLIENT_BOUND = 5  # the load generator was the bottleneck (CPU or loop lag past thresholds)
DATA_LOSS = 6  # a worker was lost mid-run: samples may be missing (result says how many)
ABORTED = 7  # the master or every worker died: partial results only
GATE_REGRESSED = 8  # `vllm-locust gate`: a rule regressed (the candidate is worse than its limit allows)
NOTHING_MEASURED = (
    9  # no request completed, and none failed: nothing was measured (none sent, or all cut off)
)
WRITE_FAILED = (
    10  # a run file could not be written (disk full, file size limit): the run stopped, what was written kept
)
INTERRUPTED = 130  # Ctrl-C / SIGTERM: partial results written

DESCRIPTIONS = {
    OK: "success",
    FAILURES: "some requests failed",
    USAGE: "invalid input",
    PREFLIGHT: "server check failed before the run",
    SCHEDULE: "arrivals dropped: offered load not delivered",
    CLIENT_BOUND: "client-bound: the load generator was the bottleneck",
    DATA_LOSS: "a worker was lost: samples may be missing",
    ABORTED: "run aborted: partial results only",
    GATE_REGRESSED: "gate: a rule regressed",
    NOTHING_MEASURED: "no request completed: nothing was measured",
    WRITE_FAILED: "writing the run's files failed: the run stopped early",
    INTERRUPTED: "interrupted: partial results written",
}
