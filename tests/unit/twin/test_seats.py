"""The seat limit read from /metrics scrapes during the saturation burst (orchestration/twin/phases.py)."""

from __future__ import annotations

from orchestration.twin.phases import seats_limit


def _scrapes(*pairs: tuple[int, int]) -> list[dict[str, int]]:
    return [{"running": r, "waiting": w} for r, w in pairs]


def test_a_plateau_with_a_queue_behind_it_is_the_limit() -> None:
    assert seats_limit(_scrapes((0, 64), (12, 52), (12, 52), (12, 40), (12, 8), (9, 0))) == 12


def test_arrivals_waiting_for_admission_are_not_a_limit() -> None:
    # measured on a simulator of 256 seats: 33 ran with 31 waiting in one scrape, then all 64 ran
    assert seats_limit(_scrapes((0, 64), (33, 31), (64, 0), (64, 0), (40, 0))) is None


def test_one_scrape_at_the_top_with_a_queue_is_not_enough() -> None:
    assert seats_limit(_scrapes((20, 44), (64, 1), (64, 0), (64, 0))) is None
    assert seats_limit(_scrapes((20, 44), (64, 1), (64, 3), (64, 0))) == 64


def test_no_scrapes_no_limit() -> None:
    assert seats_limit([]) is None
    assert seats_limit([{"running": None, "waiting": 3}]) is None
