"""Master, each worker and the server on their own hosts: network namespaces joined by a bridge.

Needs root and iproute2 (skipped otherwise). Addresses are private to namespaces this test creates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]

SUBNET = "10.213.7"
HOSTS = {"srv": 2, "master": 3, "w1": 4, "w2": 5}


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def _can_netns() -> bool:
    if os.geteuid() != 0 or not shutil.which("ip"):
        return False
    name = "vlprobe" + uuid.uuid4().hex[:4]
    try:
        _sh("ip", "netns", "add", name)
        _sh("ip", "netns", "del", name)
        return True
    except (subprocess.CalledProcessError, OSError):
        return False


@pytest.fixture
def hosts():
    if not _can_netns():
        pytest.skip("needs root and ip netns")
    tag = uuid.uuid4().hex[:4]
    br = f"vlbr{tag}"
    names = {h: f"vl{h}{tag}" for h in HOSTS}
    try:
        _sh("ip", "link", "add", br, "type", "bridge")
        _sh("ip", "link", "set", br, "up")
        for h, ns in names.items():
            _sh("ip", "netns", "add", ns)
            a, b = f"va{h}{tag}"[:15], f"vb{h}{tag}"[:15]
            _sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            _sh("ip", "link", "set", a, "master", br)
            _sh("ip", "link", "set", a, "up")
            _sh("ip", "link", "set", b, "netns", ns)
            _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{SUBNET}.{HOSTS[h]}/24", "dev", b)
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", b, "up")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield names
    finally:
        for ns in names.values():
            subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", br], capture_output=True)


def _in(ns: str, *cmd: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], **kw)


def test_master_workers_and_server_on_separate_hosts(hosts, tmp_path) -> None:
    py = sys.executable
    srv_ip, master_ip = f"{SUBNET}.{HOSTS['srv']}", f"{SUBNET}.{HOSTS['master']}"
    sim = _in(
        hosts["srv"],
        py,
        "-m",
        "vllm_sim",
        "--host",
        srv_ip,
        "--port",
        "8000",
        "--fixed",
        "--ttft-ms",
        "20",
        "--itl-ms",
        "5",
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert sim.stdout is not None and sim.stdout.readline().startswith(b"SIM_READY")
        master = _in(
            hosts["master"],
            py,
            "-m",
            "orchestration.cli",
            "run",
            "--host",
            f"http://{srv_ip}:8000",
            "--workers",
            "0",
            "--expect-workers",
            "2",
            "--master-bind-host",
            master_ip,
            "--master-port",
            "5557",
            "--users",
            "8",
            "--num-prompts",
            "120",
            "--output-len",
            "16",
            "--ignore-eos",
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "netns",
            "--no-report",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(2)
        workers = [
            _in(
                hosts[w],
                py,
                "-m",
                "orchestration.cli",
                "worker",
                "--master-host",
                master_ip,
                "--master-port",
                "5557",
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for w in ("w1", "w2")
        ]
        out, err = master.communicate(timeout=180)
        wout = [w.communicate(timeout=60)[0] for w in workers]
    finally:
        sim.kill()
    assert master.returncode == 0, (out[-2000:], err[-2000:], wout)
    res = json.load(open(tmp_path / "netns" / "result.json"))
    assert res["completed"] == 120 and res["failed"] == 0
    recs = [json.loads(x) for x in open(tmp_path / "netns" / "records.jsonl")]
    assert len({r["worker"] for r in recs}) == 2  # both remote workers measured
    assert res["meta"]["workers"] == 2
    assert all("Traceback" not in w for w in wout)
    assert [w.returncode for w in workers] == [0, 0], wout  # a failing event listener makes a worker exit 2
