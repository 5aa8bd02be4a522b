"""--stop-after-failing's watch and a user's back-off on refused connections."""

from __future__ import annotations

import pytest

from vllm_users.distributed.failure_watch import TotalFailure
from vllm_users.scenarios.backoff import CAP_S, FIRST_S, Backoff


def test_failures_alone_for_the_limit_stop_the_run() -> None:
    w = TotalFailure(3.0)
    assert not w.update(10, 0, 0.0)
    assert not w.update(10, 2, 1.0)  # failures begin
    assert not w.update(10, 9, 3.5)
    assert w.update(10, 12, 4.0)


def test_a_success_resets_the_watch_and_no_failure_never_stops() -> None:
    w = TotalFailure(3.0)
    w.update(0, 1, 0.0)
    assert not w.update(1, 5, 2.5)  # one success: not every request failed
    assert not w.update(1, 6, 3.0)
    assert not w.update(1, 6, 5.5)
    assert w.update(1, 7, 6.0)
    quiet = TotalFailure(1.0)
    assert not any(quiet.update(0, 0, t) for t in (0.0, 5.0, 50.0))  # nothing sent: not a failure


def test_the_back_off_doubles_to_its_cap_and_resets() -> None:
    b = Backoff()
    pauses = [b.after("connection") for _ in range(12)]
    assert pauses[0] == FIRST_S and pauses[1] == 2 * FIRST_S
    assert max(pauses) == CAP_S == pauses[-1]
    assert all(a <= b_ for a, b_ in zip(pauses, pauses[1:], strict=False))
    assert b.after(None) == 0.0 and b.after("connection") == FIRST_S


@pytest.mark.parametrize("kind", [None, "http", "timeout", "truncated"])
def test_only_connection_failures_back_off(kind) -> None:
    assert Backoff().after(kind) == 0.0
