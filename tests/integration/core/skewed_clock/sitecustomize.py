"""Test only, loaded through PYTHONPATH by one process: its wall clock runs VLLM_LOCUST_TEST_CLOCK_SKEW_S seconds
off (a host whose clock is skewed). time.time and time.time_ns are shifted; perf_counter and monotonic are not,
as a host's are not when NTP steps its wall clock. The kernel's receive timestamps (SO_TIMESTAMPNS) read the real
clock, which this cannot shift: they are turned off here, as a host whose whole clock is off would not need."""

from __future__ import annotations

import os
import time

_SKEW_S = float(os.environ.get("VLLM_LOCUST_TEST_CLOCK_SKEW_S") or 0.0)

if _SKEW_S:
    os.environ["VLLM_LOCUST_KERNEL_TIMESTAMPS"] = "0"
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _SKEW_S
    time.time_ns = lambda: _time_ns() + int(_SKEW_S * 1e9)
