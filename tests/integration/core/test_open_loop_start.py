"""Open loop with many users: the schedule's clock starts once every user is set up.

Arrivals must not wait for users to spawn or to finish their setup (model lookup, calibration, a tokenizer,
a dataset): the master agrees t0 with the workers once all their users wait for tickets. The bound here
(lag p99 <= 50 ms from the first arrival) holds on a busy 2-core box; the target on an idle 16-core box is
5 ms (docs/benchmarks.md, "Open-loop start").
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.integration.core.helpers import cli
from vllm_sim.launch import start_simulator

LAG_P99_BOUND_MS = 50.0  # busy 2-core box; 5 ms is the target on an idle 16-core one
SLOW_SETUP_S = 1.5

SLOW_SETUP_USER = f'''
import gevent
from vllm_users.scenarios import chat


class SlowSetupUser(chat.ChatUser):
    """A chat user whose setup waits on I/O (a slow /tokenize, a remote dataset): the loop stays free."""

    scenario = "slow_setup"

    def setup_scenario(self) -> None:
        super().setup_scenario()
        gevent.sleep({SLOW_SETUP_S})
'''


def _word_tokenizer(tmp_path) -> str:
    """A local tokenizer.json of ~30k words (the size of a real one: loading it takes milliseconds)."""
    tk = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(30_000)}}
    t = tk.Tokenizer(tk.models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = tk.pre_tokenizers.WhitespaceSplit()
    d = tmp_path / "tok"
    d.mkdir()
    t.save(str(d / "tokenizer.json"))
    return str(d)


def _lags_ms(records: list[dict]) -> np.ndarray:
    return np.array(
        [(r["t_start"] - r["t_intended"]) * 1000.0 for r in records if r.get("t_intended") is not None]
    )


def _open_loop_512(tmp_path, extra: list[str]):  # type: ignore[no-untyped-def]
    with start_simulator(["--fixed", "--ttft-ms", "20", "--itl-ms", "5"]) as sim:
        return cli(
            [
                "--host",
                sim.url,
                "--request-rate",
                "40",
                "--max-concurrency",
                "512",
                "--num-prompts",
                "400",
                "--workers",
                "2",
                "--output-len",
                "8",
                "--ignore-eos",
                "--seed",
                "3",
                *extra,
            ],
            str(tmp_path),
            timeout=240,
        )


@pytest.mark.timeout(300)
def test_open_loop_schedule_waits_for_user_setup(tmp_path) -> None:
    """Every user sleeps 1.5 s in its setup: no arrival is due before they all wait for tickets."""
    f = tmp_path / "slow_setup.py"
    f.write_text(SLOW_SETUP_USER)
    r = _open_loop_512(tmp_path, ["-f", str(f)])
    assert r.rc == 0, r.logs()[-3000:]
    arr = r.result["arrivals"]
    assert arr["scheduled"] == arr["sent"] == 400 and arr["dropped"] == 0
    lags = _lags_ms(r.records())
    assert len(lags) == 400
    assert np.percentile(lags, 99) <= LAG_P99_BOUND_MS, np.sort(lags)[-10:]
    assert "Traceback" not in r.logs()


@pytest.mark.exclusive  # client timing at the floor: alone on the machine
@pytest.mark.timeout(300)
def test_open_loop_with_a_tokenizer_and_512_users(tmp_path) -> None:
    """--tokenizer with 512 users over 2 workers: the tokenizer is loaded once per process, not once per user
    (each load blocked the loop: 256 of them held the heartbeats past the master's timeout)."""
    r = _open_loop_512(tmp_path, ["--tokenizer", _word_tokenizer(tmp_path)])
    assert r.rc == 0, r.logs()[-3000:]
    arr = r.result["arrivals"]
    assert arr["scheduled"] == arr["sent"] == 400 and arr["dropped"] == 0
    lags = _lags_ms(r.records())
    assert np.percentile(lags, 99) <= LAG_P99_BOUND_MS, np.sort(lags)[-10:]
    assert "Traceback" not in r.logs()
