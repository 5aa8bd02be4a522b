"""`vllm-locust run` against servers met in the wild, through the simulator's quirk flags:
one that ignores max_tokens (every answer 64 tokens at 10 ms: each calibration probe a full answer), one whose
usage.prompt_tokens is always 32 (and no /tokenize), and runs that complete no request at all."""

from __future__ import annotations

import json
import textwrap
import urllib.request

import pytest

from tests.integration.core.helpers import cli
from vllm_sim.launch import start_simulator
from vllm_users import exit_codes

pytestmark = pytest.mark.timeout(240)

RUN = ["--users", "16", "--run-time", "12s", "--workers", "2"]


def _served(url: str) -> int:
    with urllib.request.urlopen(url + "/sim/stats", timeout=5) as resp:
        return int(json.load(resp)["generate_requests"])


def _preflight(run_dir: str) -> dict:
    with open(f"{run_dir}/preflight.json") as fh:
        return json.load(fh)


def test_a_server_that_ignores_max_tokens_gets_its_load(tmp_path) -> None:
    """The length calibration's ~190 usage probes were each a full answer there and took the whole window: no
    load request was sent, the summary printed TTFT 0.00 and the run exited 0."""
    with start_simulator(
        [
            "--fixed",
            "--ttft-ms",
            "10",
            "--itl-ms",
            "10",
            "--ignore-max-tokens",
            "64",
            "--tokenize-api",
            "none",
        ]
    ) as sim:
        r = cli(["--host", sim.url, *RUN], str(tmp_path), timeout=180)
        served = _served(sim.url)
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] > 100 and res["failed"] == 0  # 16 users x 12 s / 0.65 s a request: ~290
    cal = _preflight(r.run_dir)["calibration"]
    assert cal["source"] == "usage (ratio)" and cal["where"] == "preflight", cal  # the word table did not fit
    assert cal["requests"] <= 200 and cal["seconds"] <= 12.0, cal  # bounded, and said in the preflight
    assert "prompt lengths: usage (ratio)" in r.out
    # calibrated once, in the preflight: the workers sent no probe (every other completion request is recorded)
    preflight = (
        len(_preflight(r.run_dir)["stream_attempts"]) + cal["requests_by_path"]["/v1/chat/completions"]
    )
    assert served == res["completed"] + res["failed"] + res.get("interrupted", 0) + preflight
    starts = [x["t_start"] for x in r.records()]
    assert max(starts) - min(starts) > 11.0  # --run-time counts from the first load request
    assert "Traceback" not in r.logs()


def test_a_server_whose_prompt_tokens_never_grow_is_not_believed(tmp_path) -> None:
    """usage.prompt_tokens always 32 made the ratio 1/400: 12,800 words (~97 KB) for --input-len 32. The simulator
    checks the context length on the real prompt: at 1024 tokens such prompts would all be refused."""
    with start_simulator(
        [
            "--fixed",
            "--ttft-ms",
            "5",
            "--itl-ms",
            "2",
            "--constant-prompt-tokens",
            "32",
            "--tokenize-api",
            "none",
            "--max-model-len",
            "1024",
        ]
    ) as sim:
        r = cli(
            ["--host", sim.url, *RUN, "--input-len", "32", "--output-len", "8"], str(tmp_path), timeout=180
        )
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] > 100 and res["failed"] == 0, res.get("errors_by_kind")  # prompts of sane size
    cal = _preflight(r.run_dir)["calibration"]
    assert cal["source"].startswith("words (rejected: usage: "), cal
    assert cal["tokens_per_word"] == 1.0 and cal["requests"] < 30
    assert any(w.startswith("PROMPT-LENGTH CALIBRATION REJECTED") for w in res["warnings"]), res.get(
        "warnings"
    )
    assert "WARNING: PROMPT-LENGTH CALIBRATION REJECTED" in r.out  # the summary
    assert "warning: PROMPT-LENGTH CALIBRATION REJECTED" in r.err  # and the preflight, on the console
    assert res["meta"]["prompt_calibration"]["source"] == cal["source"]  # the workers used the preflight's


def test_a_run_whose_every_stream_fails_says_why(tmp_path) -> None:
    with start_simulator(["--fixed", "--ttft-ms", "5", "--itl-ms", "2"]) as sim:
        r = cli(
            [
                "--host",
                sim.url,
                "--users",
                "4",
                "--num-prompts",
                "12",
                "--workers",
                "1",
                "--output-len",
                "8",
                "--ignore-eos",
                "--header",
                "X-Sim-Fault: close:1",
            ],
            str(tmp_path),
        )
    assert r.rc == 1, r.logs()[-3000:]
    assert r.result["completed"] == 0 and r.result["failed"] == 12
    last = r.err.strip().splitlines()[-1]
    assert last == "vllm-locust: error: no request completed: all 12 failed (truncated=12)", r.err[-2000:]
    assert "TTFT (ms)" not in r.out and "No request completed" in r.out


def test_a_run_that_sends_no_request_is_a_failure(tmp_path) -> None:
    idle = tmp_path / "idle.py"
    idle.write_text(
        textwrap.dedent('''
        from vllm_users.scenarios.base import LLMUser


        class Idle(LLMUser):
            """Takes its tickets and sends nothing."""

            def flow(self, ticket):
                pass
    ''')
    )
    with start_simulator(["--fixed", "--ttft-ms", "5", "--itl-ms", "2"]) as sim:
        r = cli(
            ["--host", sim.url, "-f", str(idle), "--users", "2", "--num-prompts", "6", "--workers", "1"],
            str(tmp_path),
        )
    assert r.rc == exit_codes.NOTHING_MEASURED, r.logs()[-3000:]
    assert r.result["completed"] == 0 and r.result["exit_code"] == exit_codes.NOTHING_MEASURED
    assert (
        r.err.strip().splitlines()[-1].startswith("vllm-locust: error: no request completed: no load request")
    )
    assert "TTFT (ms)" not in r.out and "0.00" not in r.out.split("vllm-locust Result")[-1]
