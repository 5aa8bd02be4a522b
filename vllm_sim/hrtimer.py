"""A sub-millisecond one-shot timer for the asyncio loop: a Linux timerfd watched by the loop's selector.

asyncio (and libuv) sleep in epoll with whole-millisecond timeouts, so `call_at` fires up to ~1 ms late;
a timerfd armed at an absolute CLOCK_MONOTONIC time (the clock of `loop.time()`) makes epoll wake on time.
Falls back to `call_at` where timerfd is unavailable.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable

# With a timerfd the loop wakes on time and only work due within 50 µs is coalesced. Without one, epoll timeouts
# are whole milliseconds rounded up: arm early and coalesce a wider window, so the emit error is centred on zero
# instead of biased late by ~0.5 ms.
EARLY_S = 0.0005
COALESCE_S = 0.0005
PRECISE_COALESCE_S = 0.00005

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or os.environ.get("VLLM_LOCUST_SIM_NO_TIMERFD"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
        return libc
    except (OSError, AttributeError):
        return None


class HrTimer:
    """One re-armable timer calling `callback()` at an absolute loop time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self.loop = loop
        self.callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._spec = _Itimerspec()
        self._libc = _libc()
        self.fd = -1
        if self._libc is not None:
            fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd >= 0:
                self.fd = fd
                loop.add_reader(fd, self._on_ready)

    @property
    def precise(self) -> bool:
        """True when backed by a timerfd (sub-millisecond)."""
        return self.fd >= 0

    def arm(self, when: float) -> None:
        """Fire once at loop time `when` (replaces any earlier arming)."""
        if self.fd < 0:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self.loop.call_at(when, self._fire_fallback)
            return
        when = max(when, 1e-9)  # 0 would disarm
        sec = int(when)
        self._spec.it_value.tv_sec = sec
        self._spec.it_value.tv_nsec = int((when - sec) * 1e9)
        assert self._libc is not None
        self._libc.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None)

    def cancel(self) -> None:
        """Disarm."""
        if self.fd < 0:
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            return
        self._spec.it_value.tv_sec = 0
        self._spec.it_value.tv_nsec = 0
        assert self._libc is not None
        self._libc.timerfd_settime(self.fd, 0, ctypes.byref(self._spec), None)

    def close(self) -> None:
        """Release the file descriptor."""
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1

    def _on_ready(self) -> None:
        try:
            os.read(self.fd, 8)  # expiration count; reading re-arms readiness
        except BlockingIOError:
            return  # disarmed or re-armed after it became readable
        self.callback()

    def _fire_fallback(self) -> None:
        self._handle = None
        self.callback()


class EarliestDeadline:
    """One HrTimer kept at the earliest of many deadlines (a heap's first): the fixed engine's writes and the API
    stage's jobs each hold one, so nothing runs while nothing is due and no timer exists per request."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self.hr = HrTimer(loop, self._fired)
        self.callback = callback
        self.early = 0.0 if self.hr.precise else EARLY_S
        # a wake-up runs everything due within this much of now (`callback` reads it)
        self.coalesce = PRECISE_COALESCE_S if self.hr.precise else COALESCE_S
        self.armed = False
        self.timer_at = 0.0

    def wake_by(self, deadline: float) -> None:
        """Make the callback run by loop time `deadline` (no change when already armed as early)."""
        when = deadline - self.early
        if self.armed and self.timer_at <= when:
            return
        self.armed = True
        self.timer_at = when
        self.hr.arm(when)

    def cancel(self) -> None:
        """Disarm (the deadlines moved: the caller wakes it again)."""
        if self.armed:
            self.hr.cancel()
            self.armed = False

    def _fired(self) -> None:
        self.armed = False
        self.callback()
