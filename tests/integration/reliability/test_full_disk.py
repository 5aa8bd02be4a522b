"""A disk that fills mid-run (a 2 MiB tmpfs under --output-dir): the run stops at once, exits 10, and keeps what
it measured: result.json, exit_code.json and histograms.json written, no half file, no torn record, the records
that did not fit counted."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.integration.core.helpers import cli
from vllm_users import exit_codes

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only: skipped, loudly, where the mount is refused)."""
    where = tmp_path / "disk"
    where.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True, text=True
    )
    if p.returncode != 0:
        pytest.skip(f"SKIPPED: cannot mount a 2 MiB tmpfs for the full disk ({p.stderr.strip()})")
    try:
        yield str(where)
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_keeps_the_end_files_whole_records_and_exits_10(small_disk) -> None:
    r = cli(
        ["--run-time", "60", "--users", "16", "--workers", "1", "--output-len", "1024"]
        + ["--sim-args", "--fixed --ttft-ms 2 --itl-ms 1"],
        small_disk,
        timeout=120,
    )
    assert r.rc == exit_codes.WRITE_FAILED, (r.rc, r.logs()[-3000:])
    names = os.listdir(r.run_dir)
    for end_file in ("result.json", "exit_code.json", "histograms.json", "run_meta.json"):
        assert end_file in names, names
    assert not [n for n in names if n.endswith(".tmp")], names  # no empty half file left behind
    assert ".end-files-reserve" not in names  # the room held for them was given back
    with open(os.path.join(r.run_dir, "exit_code.json")) as fh:
        assert json.load(fh) == {"exit_code": exit_codes.WRITE_FAILED}
    with open(os.path.join(r.run_dir, "records.jsonl"), "rb") as fh:
        raw = fh.read()
    assert raw.endswith(b"\n")  # a record is whole or absent
    lines = raw.splitlines()
    for line in lines:
        json.loads(line)
    res = r.result
    assert res["exit_code"] == exit_codes.WRITE_FAILED
    assert res["completed"] + res["failed"] == len(lines)
    said = [w for w in res["warnings"] if "No space left on device" in w]
    assert said and "were not written" in said[0], res["warnings"]
    # the server's count less the records: every request it served is recorded or counted as not written
    assert res["missing_vs_server"] is not None
    assert "Traceback" not in r.logs()
    stops = [m for m in res["timeline"] if m["kind"] == "stop"]
    assert stops and stops[0]["reason"] == "write failed"
