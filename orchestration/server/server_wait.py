"""--wait-for-server: the preflight's patience with a server still starting (connections refused, or 502, 503,
504 from it or from the gateway in front of it): a try again after each such answer, one line per wait, until
the time given is up; then the error names the server's last answer."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from vllm_users.errors import PreflightError

__all__ = ["STARTING_STATUSES", "WAIT_STEP_S", "Wait", "not_ready"]

STARTING_STATUSES = (502, 503, 504)  # a server (or the backend behind a gateway) not up yet
# the pause between two tries when the server names none (no Retry-After): 0.5 s more each time, at most 5 s
WAIT_STEP_S = (0.5, 5.0)


@dataclass
class Wait:
    """--wait-for-server: until when a server that refuses or answers 502/503/504 is tried again, and where
    each wait's one line goes."""

    seconds: float = 0.0
    say: Callable[[str], None] | None = None
    deadline: float = field(default=0.0)
    tries: int = 0

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def again(self, url: str, what: str, retry_after: str | None = None) -> bool:
        """After a try that found the server not up (`what`): sleep and say so (True), or False when the time
        is up (or there is none: no --wait-for-server)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        self.tries += 1
        pause = _retry_after_s(retry_after)
        if pause is None:
            pause = min(WAIT_STEP_S[1], WAIT_STEP_S[0] * self.tries)
        pause = max(0.05, min(pause, left))
        if self.say is not None:
            self.say(
                f"waiting for {url}: {what}; trying again in {pause:.1f} s ({left:.1f} s left of --wait-for-server)"
            )
        time.sleep(pause)
        return True


def _retry_after_s(value: str | None) -> float | None:
    """A Retry-After in seconds (its HTTP-date form is not worth a clock comparison here: None)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def not_ready(url: str, what: str, waited: Wait) -> PreflightError:
    """The final error for a server that never came up: its last answer, and how long it was given."""
    if waited.seconds:
        return PreflightError(f"{url} is not ready after {waited.seconds:g} s (--wait-for-server): {what}")
    return PreflightError(f"{url} is not ready: {what} (to wait for a starting server: --wait-for-server S)")
