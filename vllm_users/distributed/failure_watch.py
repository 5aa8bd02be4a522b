"""--stop-after-failing: the master's watch for a run in which every request fails (a server gone away), read
from the workers' live totals (ok and failed, every second)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TotalFailure"]


@dataclass
class TotalFailure:
    """Whether every request has failed, and none succeeded, for `limit_s` seconds (the totals' view)."""

    limit_s: float
    ok: float = 0.0
    failed: float = 0.0
    since: float | None = None  # when failures began with no success after them

    def update(self, ok: float, failed: float, now: float) -> bool:
        """Take the totals seen at `now`; True once failures alone have come in for `limit_s` seconds."""
        if ok > self.ok:
            self.since = None
        elif failed > self.failed and self.since is None:
            self.since = now
        self.ok, self.failed = max(self.ok, ok), max(self.failed, failed)
        return self.since is not None and now - self.since >= self.limit_s
