"""`vllm-locust calibrate` behind a gateway: its --header, the API key and a URL's password reach every probe
request of a server that refuses the others, and none of them is written to the twin profile or printed."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest

from vllm_sim.launch import start_simulator

pytestmark = pytest.mark.timeout(120)


def test_calibrate_sends_the_gateway_header_key_and_userinfo(tmp_path) -> None:
    key, gateway, password = "key-cal-5150", "gw-cal-2112", "pw-cal-1984"
    basic = base64.b64encode(f"al:{password}".encode()).decode()
    out = tmp_path / "twin.json"
    with start_simulator(
        ["--api-key", key, "--require-header", f"X-Gateway-Token: {gateway}", "--max-num-seqs", "4"]
    ) as sim:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestration.cli",
                "calibrate",
                "--budget",
                "20s",
                "--host",
                sim.url.replace("http://", f"http://al:{password}@"),
                "--api-key",
                key,
                "--header",
                f"X-Gateway-Token: {gateway}",
                "--max-concurrency",
                "2",
                "--saturation-requests",
                "4",
                "-o",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert p.returncode == 0, p.stderr[-2000:]
    text = out.read_text() + p.stdout + p.stderr
    assert sim.url in text  # the profile names the server, without its userinfo
    assert not [s for s in (key, gateway, password, basic) if s in text]
