"""Two bad inputs that were tracebacks (exit 1): a config file that is not UTF-8, and the simulator's --port
past 65535. Each is one line naming what is wrong, and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestration.settings.config import load_config
from vllm_users.errors import UsageError


def test_a_config_file_that_is_not_utf8_is_a_usage_error(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_bytes(b"users: 4\n\xff\xfe bad\n")
    with pytest.raises(UsageError, match=r"run.yaml is not UTF-8 text \(byte 0xff at offset 9\)"):
        load_config(str(path))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_both_are_one_line_and_exit_2_from_the_command_line(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_bytes(b"\xff\xfe\x00")
    for args, said in (
        (("run", "--config", str(path)), "is not UTF-8 text"),
        (("sim", "--port", "99999"), "--port must be 0-65535"),
    ):
        p = _cli(*args)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2, (args, p.returncode, p.stderr[-1500:])
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in p.stderr, lines
