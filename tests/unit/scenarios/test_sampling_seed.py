"""A repeat changes its prompts' seed (--seed + k), never the sampling: the bodies of every repeat are alike, and
the body's `seed` is --sampling-seed's (none by default, as `vllm bench serve` sends)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.scenarios.test_prompt_options import _user
from vllm_users.scenarios.chat import ChatUser
from vllm_users.workload.ticket import Ticket


def _bodies(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> list[dict[str, Any]]:
    """One request body per repeat's seed (0, 1, 2), without the prompt (which a repeat changes on purpose)."""
    out = []
    for seed in (0, 1, 2):
        body = dict(_user(ChatUser, monkeypatch, seed=seed, **kw).build_request(Ticket(3)).body)
        assert body.pop("messages")
        out.append(body)
    return out


def test_repeats_send_alike_bodies_without_a_sampling_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = _bodies(monkeypatch)
    assert bodies[0] == bodies[1] == bodies[2]
    assert "seed" not in bodies[0]  # repeat 2 used to send seed 1, repeat 3 seed 2, repeat 1 none


@pytest.mark.parametrize("sampling", [0, 7])
def test_sampling_seed_is_the_users_choice(monkeypatch: pytest.MonkeyPatch, sampling: int) -> None:
    bodies = _bodies(monkeypatch, sampling_seed=sampling)
    assert [b["seed"] for b in bodies] == [sampling] * 3
