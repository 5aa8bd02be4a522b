"""Cross-checks of the capacity-planning options of `vllm-locust run` (repeats, sweeps, the SLO search, cost,
profiling); each group checks its own rules (vllm_users.run_options, vllm_users.distributed.options)."""

from __future__ import annotations

from orchestration.settings import config as C
from vllm_users.options import Options, changed


def validate(o: Options) -> Options:
    """Cross-option checks of the capacity options (UsageError with one line); the options with the older
    --concurrency-sweep folded into --sweep and a ramp's open-loop ceiling set. Checking them twice is harmless."""
    o.capacity.check()
    if o.capacity.concurrency_sweep:  # the older flag is a concurrency sweep
        o = changed(o, sweep="concurrency:" + o.capacity.concurrency_sweep, concurrency_sweep="")
    if o.capacity.find_max_rate:
        if not o.measure.goodput and not _class_slos(o.classes.class_):
            raise C.UsageError(
                "--find-max-rate needs the SLO: --goodput ttft:MS tpot:MS [e2el:MS] (or a --class "
                "with ttft=, tpot= or e2el=)"
            )
        if (
            o.load.users is not None
            or o.load.request_rate is not None
            or o.capacity.sweep
            or o.load.ramp_up_strategy
        ):
            raise C.UsageError(
                "--find-max-rate chooses the rates itself: leave out --users, --request-rate, --sweep "
                "and --ramp-up-strategy"
            )
    if o.capacity.sweep:
        from orchestration.capacity.sweep import parse_sweep

        parse_sweep(o.capacity.sweep)  # a bad value is a usage error before anything starts
    o.load.check()
    if o.load.ramp_up_strategy is not None:
        o = changed(o, request_rate=o.load.ramp_up_end_rps)  # open loop, at most this fast
    return o


def _class_slos(texts: tuple[str, ...]) -> bool:
    """True when a --class names an SLO of its own (--find-max-rate then judges each class against its own)."""
    from vllm_users.workload.classes import parse_class

    return any(parse_class(t).slo_ms() for t in texts)
