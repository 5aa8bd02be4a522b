"""A closed-loop user's pause after a refused or reset connection: doubling from FIRST_S up to CAP_S, reset by
any other outcome, so that a server that went away gets a few attempts a second per user, not thousands."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CAP_S", "FIRST_S", "Backoff"]

FIRST_S = 0.05  # the first pause: a blip (a restarting proxy) costs little
CAP_S = 2.0  # the longest: a user sees a server that comes back within 2 s of its return


@dataclass
class Backoff:
    """One user's back-off on connection failures."""

    pause_s: float = 0.0

    def after(self, error: str | None) -> float:
        """The pause before the user's next request, given how its last one ended (`error`: its failure kind)."""
        if error == "connection":
            self.pause_s = min(CAP_S, max(FIRST_S, 2 * self.pause_s))
        else:
            self.pause_s = 0.0
        return self.pause_s
