"""A request's two deadlines: the whole request (`--request-timeout`) and the time with no content
(`--stall-timeout`), and the exception that ends a request at either.

`--stream-timeout` bounds one read, so a gateway that sends `: ping` every 100 ms keeps a stream alive forever;
these two do not reset on bytes, only on the clock (request) or on an output chunk (stall). They are checked off
the hot path: by the reactor's periodic timer for every stream at once, and once per read by the greenlet reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

__all__ = ["NO_LIMITS", "DeadlineExceeded", "Limits"]

REQUEST_TIMEOUT = "request_timeout"  # the failure kinds (measure/kinds.py spells them for records)
STALL_TIMEOUT = "stall_timeout"


class DeadlineExceeded(Exception):
    """A request ended by one of its deadlines: `kind` is the failure kind, `detail` the record's words."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Limits:
    """A request's deadlines in seconds; 0 = none."""

    request_s: float = 0.0
    stall_s: float = 0.0

    @property
    def any(self) -> bool:
        """True when at least one deadline applies."""
        return self.request_s > 0 or self.stall_s > 0

    def deadline(self, t0: float) -> float:
        """The perf_counter time the request must end by (inf: none)."""
        return t0 + self.request_s if self.request_s > 0 else math.inf

    def first(self, streamed: bool) -> float:
        """Seconds until the first deadline that can strike before any content (0: none). A non-streamed
        answer has no content before its end, so only the request deadline applies to it."""
        return self._firsts[streamed]

    @cached_property
    def _firsts(self) -> dict[bool, float]:
        def first(streamed: bool) -> float:
            bounds = [s for s in (self.request_s, self.stall_s if streamed else 0.0) if s > 0]
            return min(bounds) if bounds else 0.0

        return {True: first(True), False: first(False)}

    def header_error(self, streamed: bool) -> DeadlineExceeded:
        """The error of a request whose headers did not come within `first(streamed)` seconds (made once per
        Limits: a request's timer takes it, and formatting it per request would cost a microsecond or two)."""
        return self._header_errors[streamed]

    @cached_property
    def _header_errors(self) -> dict[bool, DeadlineExceeded]:
        stall_first = self.stall_s > 0 and (self.request_s <= 0 or self.stall_s < self.request_s)
        return {True: self.stalled(0) if stall_first else self.overran(), False: self.overran()}

    def overran(self) -> DeadlineExceeded:
        """The error of a request that ran past `request_s`."""
        return DeadlineExceeded(REQUEST_TIMEOUT, f"request ran past --request-timeout {self.request_s:g} s")

    def stalled(self, chunks: int) -> DeadlineExceeded:
        """The error of a stream with no output chunk for `stall_s` (after `chunks` of them)."""
        return DeadlineExceeded(
            STALL_TIMEOUT,
            f"no output for --stall-timeout {self.stall_s:g} s after {chunks} chunk{'s' if chunks != 1 else ''}",
        )

    def check(self, now: float, deadline: float, last_content: float, chunks: int) -> DeadlineExceeded | None:
        """The deadline a stream has passed at `now` (None: neither); `last_content`: its last output chunk, or
        its start before the first."""
        if now > deadline:
            return self.overran()
        if self.stall_s > 0 and now - last_content > self.stall_s:
            return self.stalled(chunks)
        return None


NO_LIMITS = Limits()
