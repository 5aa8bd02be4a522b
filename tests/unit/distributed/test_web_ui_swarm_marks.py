"""The web UI's swarm POSTs on the run's timeline: the start is not an edit, even where Locust's start greenlet
(which fires test_start) runs before our after-request hook, as it can on a busy master."""

from __future__ import annotations

from typing import Any

import gevent
from locust import User, constant
from locust.env import Environment

from vllm_users.distributed.views import web_ui


class Idle(User):
    """A user that only waits: the swarm's users cost nothing."""

    wait_time = constant(60)

    def run(self) -> None:  # type: ignore[override]
        gevent.sleep(60)


class Plugin:
    """The master plugin's face to the tab: its collector appears at test_start; each edit is recorded."""

    def __init__(self, env: Environment) -> None:
        self.collector: Any = None
        self.live = None
        self.results_dir = ""
        self.written = False
        self.edits: list[tuple[str | None, str | None]] = []
        env.events.test_start.add_listener(self._start)

    def _start(self, **_: Any) -> None:
        self.collector = object()

    def on_swarm(self, users: str | None, spawn_rate: str | None) -> None:
        self.edits.append((users, spawn_rate))

    def change_rate(self, rate: float) -> tuple[bool, str]:
        return False, "not here"


def _ui(yield_before_hook: bool) -> tuple[Any, Plugin, Environment]:
    env = Environment(user_classes=[Idle])
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", 0)
    assert env.web_ui is not None
    plugin = Plugin(env)
    web_ui.install(env, plugin)
    if yield_before_hook:
        # after-request hooks run last-registered first: this one runs before the tab's and lets Locust's start
        # greenlet (test_start) run, as a busy master's scheduling can
        env.web_ui.app.after_request(lambda response: (gevent.sleep(0.05), response)[1])
    return env.web_ui.app.test_client(), plugin, env


def test_the_start_is_not_an_edit_even_when_test_start_ran_first(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(
        "sys.argv", ["locust"]
    )  # Locust's /swarm reads its extra options from the command line
    for race in (False, True):
        client, plugin, env = _ui(race)
        try:
            r = client.post("/swarm", data={"user_count": "2", "spawn_rate": "2"})
            assert r.get_json()["success"]
            gevent.sleep(0.1)
            assert plugin.collector is not None  # the start reached test_start
            assert plugin.edits == [], (race, plugin.edits)
            r = client.post("/swarm", data={"user_count": "8", "spawn_rate": "4"})
            assert r.get_json()["success"]
            assert plugin.edits == [("8", "4")], (race, plugin.edits)
        finally:
            assert env.runner is not None
            env.runner.quit()
