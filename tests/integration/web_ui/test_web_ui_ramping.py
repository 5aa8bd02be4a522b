"""Live ramping from the web UI in Chromium: the open-loop request rate and the closed-loop user count,
each change kept on the result's timeline, and every worker re-planning its share of the schedule."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from orchestration.launch.ports import free_port
from tests.integration.web_ui.cdp import CHROMIUM, Browser
from tests.integration.web_ui.test_web_ui_chromium import _end, _keep, _open_ui, _start_swarm, _start_ui_run
from vllm_sim.launch import start_simulator

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)"),
    pytest.mark.timeout(300),
]
COMPLETED = "Number(document.querySelector('#llm-panel [data-llm=completed]').innerText.replace(/,/g, ''))"
STOP = "Array.from(document.querySelectorAll('header button')).find(b => b.textContent.trim().toLowerCase() === 'stop')"


def _start(b: Browser, port: int) -> None:
    """Open the UI, click the form's Start and the LLM tab (real clicks)."""
    _open_ui(b, port)
    _start_swarm(b, port)


def _stop(b: Browser) -> None:
    """Click the header's Stop; wait until the tab says the run directory is written."""
    b.click(STOP)
    b.wait_for(
        "document.querySelector('#llm-panel [data-llm=status]').innerText.startsWith('finished')", timeout=90
    )


def test_open_loop_rate_changed_from_the_tab(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    with start_simulator(["--fixed", "--ttft-ms", "10", "--itl-ms", "2"]) as sim:
        p = _start_ui_run(
            str(tmp_path),
            sim.url,
            port,
            [
                "--request-rate",
                "4",
                "--max-concurrency",
                "16",
                "--run-time",
                "120s",
                "--output-len",
                "8",
                "--ignore-eos",
            ],
        )
        try:
            with Browser(shot_on_error=str(tmp_path / "failure.png")) as b:
                _start(b, port)
                b.wait_for(f"{COMPLETED} >= 24", timeout=90)
                b.js("document.getElementById('llm-rate-input').value = '16'")
                b.click("document.getElementById('llm-rate-button')")  # a real click on the tab's button
                b.wait_for("document.getElementById('llm-rate-msg').innerText.includes('16')")
                b.wait_for(f"{COMPLETED} >= 24 + 16 * 6", timeout=90)
                b.wait_for(
                    "document.querySelector('#llm-panel [data-llm=chart_tok_s]').textContent.includes('16 req/s')"
                )
                _keep(b.screenshot(str(tmp_path / "rate.png")), "web_ui_rate_change.png")
                _stop(b)
        finally:
            rc = _end(p)
    run_dir = os.path.join(str(tmp_path), "ui")
    res = json.load(open(os.path.join(run_dir, "result.json")))
    assert rc in (0, 4), open(os.path.join(str(tmp_path), "cli.out")).read()[-2000:]
    change = next(e for e in res["timeline"] if e["kind"] == "rate")
    assert change["request_rate"] == 16
    recs = [json.loads(x) for x in open(os.path.join(run_dir, "records.jsonl")) if x.strip()]
    intended = np.sort([r["t_intended"] for r in recs if r["t_intended"] is not None])
    before = intended[intended < change["t"]]
    after = intended[intended > change["t"] + 1.0]
    rate_before = (len(before) - 1) / (before[-1] - before[0])
    rate_after = (len(after) - 1) / (after[-1] - after[0])
    assert 2.5 < rate_before < 6.0, rate_before  # Poisson at 4/s over ~6 s
    assert 11.0 < rate_after < 22.0, rate_after  # Poisson at 16/s
    assert (
        len({r["worker"] for r in recs if r["t_intended"] > change["t"] + 1.0}) == 2
    )  # both workers re-planned


def test_closed_loop_users_edited_live(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    with start_simulator(["--fixed", "--ttft-ms", "20", "--itl-ms", "10"]) as sim:
        p = _start_ui_run(
            str(tmp_path),
            sim.url,
            port,
            ["--users", "2", "--run-time", "120s", "--output-len", "16", "--ignore-eos"],
        )
        try:
            with Browser(shot_on_error=str(tmp_path / "failure.png")) as b:
                _start(b, port)
                b.wait_for(f"{COMPLETED} >= 10", timeout=90)
                # the same POST the UI's Edit form sends, made from the page
                r = b.js(
                    "fetch('./swarm', {method: 'POST', body: new URLSearchParams({user_count: '8', spawn_rate: '8',"
                    " host: document.querySelector('header').innerText.match(/http\\S+/)[0]})}).then(r => r.json())"
                )
                assert r["success"], r
                b.wait_for(
                    "document.querySelector('#llm-panel [data-llm=inflight]').innerText === '8'", timeout=60
                )
                b.wait_for(
                    "document.querySelector('#llm-panel [data-llm=chart_queue]').textContent.includes('8 users')"
                )
                _stop(b)
        finally:
            rc = _end(p)
    run_dir = os.path.join(str(tmp_path), "ui")
    res = json.load(open(os.path.join(run_dir, "result.json")))
    assert rc == 0, open(os.path.join(str(tmp_path), "cli.out")).read()[-2000:]
    kinds = [e["kind"] for e in res["timeline"]]
    assert kinds[0] == "start" and "users" in kinds and kinds[-1] == "stop"
    # the start's own swarm is the "start" mark, never a "users" change (judged before Locust spawns the start)
    assert [e["users"] for e in res["timeline"] if e["kind"] == "users"] == [8], res["timeline"]
    assert res["max_concurrent_requests"] == 8 and res.get("interrupted", 0) == 0 and res["failed"] == 0
