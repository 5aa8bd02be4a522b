"""The capacity options as a run uses them: the older --concurrency-sweep folded into --sweep, and a ramp's end
rate as its open-loop ceiling. Their rules are checked where the options are built (vllm_users.capacity_options,
vllm_users.option_rules)."""

from __future__ import annotations

from vllm_users.options import Options, changed

__all__ = ["settle"]


def settle(o: Options) -> Options:
    """The options with --concurrency-sweep folded into --sweep and a ramp's open-loop ceiling set (settling
    them twice is harmless)."""
    if o.capacity.concurrency_sweep:  # the older flag is a concurrency sweep
        o = changed(o, sweep="concurrency:" + o.capacity.concurrency_sweep, concurrency_sweep="")
    if o.load.ramp_up_strategy is not None:
        o = changed(o, request_rate=o.load.ramp_up_end_rps)  # open loop, at most this fast
    return o
