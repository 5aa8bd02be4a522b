"""The master's command line that `vllm-locust run` builds: how many users each loop starts, the spawn rate,
the stop timeout with its margin, and --headless or the web UI's flags."""

from __future__ import annotations

from orchestration.launch.launcher import DEFAULT_OPEN_LOOP_SLOTS, locust_args
from vllm_users.options import build


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _args(**values: object) -> list[str]:
    return locust_args(build(**values), "http://127.0.0.1:1", "m", "/tmp/run", "lf.py", 5557)


def test_closed_loop_users_come_from_users_then_max_concurrency_then_eight() -> None:
    assert _flag(_args(users=3), "-u") == "3"
    assert _flag(_args(max_concurrency=5), "-u") == "5"
    assert _flag(_args(), "-u") == "8"
    assert _flag(_args(users=3), "-r") == "12"  # every user within ~0.25 s
    assert _flag(_args(users=3, spawn_rate=1.0), "-r") == "1.0"


def test_open_loop_users_are_its_slots() -> None:
    assert _flag(_args(request_rate=5.0), "-u") == str(DEFAULT_OPEN_LOOP_SLOTS)
    assert _flag(_args(request_rate=5.0, max_concurrency=7), "-u") == "7"


def test_stop_timeout_leaves_the_streams_five_seconds_more() -> None:
    assert _flag(_args(stop_timeout=2.2), "--stop-timeout") == "8s"
    assert _flag(_args(), "--master-bind-port") == "5557" and _flag(_args(), "--host") == "http://127.0.0.1:1"


def test_headless_unless_the_web_ui_is_asked_for() -> None:
    assert "--headless" in _args() and "--web-port" not in _args()
    web = _args(web_ui=True, web_port=8099)
    assert "--headless" not in web and _flag(web, "--web-port") == "8099"
    assert "--run-time" not in _args() and _flag(_args(run_time=1.5), "--run-time") == "2s"
