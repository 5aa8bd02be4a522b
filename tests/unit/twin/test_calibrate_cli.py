"""`vllm-locust calibrate`'s bad input: one line, exit 2 (usage) or 3 (the server)."""

from __future__ import annotations

import socket

import pytest

from orchestration.cli import main
from orchestration.commands.calibrate import parse_budget
from orchestration.twin.probe import parse_metrics
from vllm_users import errors


def test_parse_budget() -> None:
    assert parse_budget("180s") == 180.0 and parse_budget("3m") == 180.0 and parse_budget("2.5") == 2.5
    for bad in ("0", "-1s", "soon", "3h"):
        with pytest.raises(errors.UsageError, match="--budget"):
            parse_budget(bad)


def test_bad_budget_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--host", "http://127.0.0.1:9", "--budget", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--budget 'soon'" in err


def test_an_unreachable_server_is_exit_3(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "t.json"
    assert main(["calibrate", "--host", f"http://127.0.0.1:{port}", "--budget", "5s", "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach" in err and not out.exists()


def test_parse_metrics_sums_engines() -> None:
    text = (
        '# HELP x\nvllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1.0\n'
    )
    m = parse_metrics(text)
    assert sum(v for _, v in m["vllm:num_requests_running"]) == 7.0
    assert m["vllm:cache_config_info"][0][0] == {"block_size": "16", "num_gpu_blocks": "1000"}


def test_the_decode_batches_reach_the_largest_asked() -> None:
    from orchestration.commands.calibrate import batch_sizes

    assert batch_sizes(1) == (1,)
    assert batch_sizes(16) == (1, 2, 4, 8, 16)
    assert batch_sizes(256)[-2:] == (128, 256)  # GPU servers: the cost per sequence shows at large batches
    assert batch_sizes(100) == (1, 2, 4, 8, 16, 32, 64, 100)
