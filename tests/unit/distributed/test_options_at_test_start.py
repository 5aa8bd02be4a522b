"""A Locust process rebuilds its options at each test start (the web UI's form may have changed them): options
that break a rule stop that test with one line, and the process keeps its earlier options."""

from __future__ import annotations

import logging
from typing import Any

import gevent
import pytest
from locust import User, constant
from locust.argument_parser import get_parser
from locust.env import Environment

from vllm_users.distributed import env_state, plugin


class Idle(User):
    wait_time = constant(60)


def test_a_form_that_breaks_a_rule_stops_the_test_in_one_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Environment(user_classes=[Idle], parsed_options=get_parser().parse_args([]))
    runner = env.create_local_runner()
    before = env_state.refresh_options(env)
    stopped: list[bool] = []
    monkeypatch.setattr(runner, "stop", lambda *a, **k: stopped.append(True))
    ns: Any = env.parsed_options
    ns.ramp_up_strategy, ns.num_prompts = "linear", "10"  # as the web UI's form sets them: no rates
    with caplog.at_level(logging.ERROR, logger="vllm_locust"):
        plugin._on_test_start(environment=env)
        gevent.sleep(0)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [
        "vllm-locust: error: --ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps"
    ]
    assert stopped == [True]
    assert env_state.options(env) is before and env_state.context_or_none(env) is None
