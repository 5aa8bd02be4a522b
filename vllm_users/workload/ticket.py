"""Ticket: permission to start one session, handed to a user by its worker (budget grant or arrival schedule)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Ticket"]


@dataclass(slots=True)
class Ticket:
    """Permission to start one session (one request, or several for a multi-step user): its global index,
    open loop its intended epoch time, and how many requests the session has sent so far."""

    index: int
    t_intended: float | None = None
    sent: int = 0
