"""`--warmup` / `--cooldown` through the real CLI: records kept, statistics from the measured window."""

from __future__ import annotations

import pytest

from tests.integration.core.helpers import cli


@pytest.mark.timeout(180)
def test_warmup_and_cooldown_windows(tmp_path) -> None:
    r = cli(
        [
            "--users",
            "4",
            "--num-prompts",
            "60",
            "--workers",
            "1",
            "--output-len",
            "8",
            "--ignore-eos",
            "--warmup",
            "12r",
            "--cooldown",
            "8r",
            "--sim-args",
            "--fixed --ttft-ms 10 --itl-ms 2",
        ],
        str(tmp_path),
    )
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert len(r.records()) == 60  # every request stays in the records
    w = res["windows"]
    assert (w["warmup"]["requests"], w["cooldown"]["requests"], w["measured"]["requests"]) == (12, 8, 40)
    assert res["completed"] == 40 and res["meta"]["warmup"] == "12r"
    assert "Warm-up excluded (12r):" in r.out and "Measured window:" in r.out


def test_bad_window_is_a_usage_error(tmp_path) -> None:
    r = cli(["--warmup", "ten"], str(tmp_path))
    assert r.rc == 2 and "is not a window like 30s, 2m or 200r" in r.err
