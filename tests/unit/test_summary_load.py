"""The summary states the load that was applied (the loop, rate, burstiness and cap; endpoint and host, never a
password; the lengths asked and sent), result.json's max_concurrency is the closed loop's users (null for an
uncapped open loop), and the progress line says `ok 27/200` where the total is known."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from locust.env import Environment

from orchestration.report.summary import format_summary, progress_line, requests_total
from tests.unit.measure.helpers import rec
from vllm_users.distributed.run_end import closed_loop_users, run_meta
from vllm_users.measure.result_builder import build_run_result
from vllm_users.options import build

HOST = "http://alice:s3cret-pw@127.0.0.1:8000"


def _env(users: int | None) -> Environment:
    return Environment(
        user_classes=[], host=HOST, parsed_options=argparse.Namespace(num_users=users, run_time=None)
    )


def _result(o: Any, users: int | None, timeline: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta = run_meta(o, _env(users), 0.0, timeline=timeline)
    recs = [rec(float(i), [10.0, 20.0, 30.0], out=3, prompt=130) for i in range(4)]
    return build_run_result(recs, meta).to_json()


def test_a_closed_loop_is_its_users_everywhere() -> None:
    res = _result(build(users=8, num_prompts=4, input_len=128, output_len=64), 8)
    assert res["max_concurrency"] == 8 and res["request_rate"] == "inf"  # vllm bench serve's way to say it
    text = format_summary(res)
    assert "closed loop of 8 users" in text
    assert "Maximum request concurrency:" in text and "Endpoint:" in text
    assert "chat at http://127.0.0.1:8000" in text and "s3cret-pw" not in text and "alice" not in text
    assert "130.0 / 3.0 mean; asked 128 / 64" in text
    # a result written elsewhere with a password in its host: the summary shows the host without it
    theirs = dict(res, meta=dict(res["meta"], host=HOST))
    assert "s3cret-pw" not in format_summary(theirs) and "127.0.0.1:8000" in format_summary(theirs)


def test_the_web_ui_s_most_users_are_the_cap() -> None:
    assert closed_loop_users(4, [{"kind": "start", "users": 4}, {"kind": "users", "users": 20.0}]) == 20
    assert closed_loop_users(None, []) is None
    res = _result(build(num_prompts=4), 4, [{"kind": "users", "users": 12.0}])
    assert res["max_concurrency"] == 12


def test_an_uncapped_open_loop_has_no_max_concurrency() -> None:
    res = _result(build(request_rate=5.0, num_prompts=4), 256)  # its 256 users are slots, not a cap
    assert res["max_concurrency"] is None
    text = format_summary(res)
    assert "open loop at 5 req/s, Poisson (burstiness 1), uncapped" in text
    assert "Maximum request concurrency:" not in text


def test_a_capped_open_loop_states_rate_burstiness_and_cap() -> None:
    res = _result(build(request_rate=2.5, burstiness=0.5, max_concurrency=16, num_prompts=4), 16)
    assert res["max_concurrency"] == 16
    assert "open loop at 2.5 req/s, gamma (burstiness 0.5), at most 16 in flight" in format_summary(res)
    everything = _result(build(request_rate=float("inf"), num_prompts=4), 256)
    assert "open loop, all at once (rate inf), uncapped" in format_summary(everything)


def test_a_dataset_s_lengths_are_not_called_asked(tmp_path: Any) -> None:
    data = tmp_path / "sharegpt.json"
    data.write_text("[]")
    res = _result(build(users=2, num_prompts=4, dataset=str(data)), 2)
    text = format_summary(res)
    assert "from the dataset sharegpt.json" in text and "asked" not in text


@pytest.mark.parametrize(
    ("opts", "total"),
    [
        ({"num_prompts": 200}, 200),
        ({"num_prompts": 200, "scenario": "json:1,multi-turn:1"}, 200),  # one request per ticket, each
        ({"num_prompts": 200, "scenario": "tools"}, None),  # a follow-up request in some sessions
        ({"num_prompts": 200, "run_time": 30.0}, None),  # the time may end it first
        ({"run_time": 30.0}, None),
        ({"num_prompts": 200, "web_ui": True}, None),
    ],
)
def test_the_progress_says_completed_of_total_where_known(opts: dict[str, Any], total: int | None) -> None:
    a = build(**opts)
    assert requests_total(a) == total
    p = {"elapsed_s": 2.5, "ok": 27, "failed": 1, "inflight": 8, "output_tok_per_s": 812.4}
    line = progress_line(p, requests_total(a))
    assert ("ok 27/200  failed 1" in line) if total else ("ok 27  failed 1" in line), line
