"""What a full disk leaves: whole record lines (a torn one cut), no empty `.tmp` of a file whose write failed, and
room held from the start for the end-of-run files."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.unit.measure.helpers import rec
from vllm_users import atomic
from vllm_users.distributed.transport.master_side import Collector, whole_lines
from vllm_users.measure.records_store import load_columns


class _FillsHalfway:
    """records.jsonl on a disk that fills in the middle of a write: two lines and a part of the third land,
    then ENOSPC."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, data: str) -> int:
        self.real.write(data[: _cut(data)])
        self.real.flush()
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        raise OSError(28, "No space left on device")

    def close(self) -> None:
        self.real.close()


def _cut(data: str) -> int:
    return data.index("\n", data.index("\n") + 1) + 10


def _batch(n: int, t0: float = 0.0) -> dict[str, Any]:
    lines = "\n".join(rec(t0 + i, [10, 20], out=2).to_json() for i in range(n))
    return {"worker": "w0", "records": lines, "n": n, "hists": {}, "health": {}, "final": False, "totals": {}}


def test_a_write_torn_by_a_full_disk_leaves_whole_records_only(tmp_path) -> None:
    c = Collector(str(tmp_path))
    c.on_batch(_batch(3))
    c.flush()
    c._fh = _FillsHalfway(c._fh)
    b = _batch(4, t0=10.0)
    landed = (b["records"] + "\n")[: _cut(b["records"])]
    whole = landed.count("\n")
    assert whole == 2 and not landed.endswith("\n")
    c.on_batch(b)
    assert c.write_error is not None
    c.close()
    raw = (tmp_path / "records.jsonl").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 3 + whole
    cols = load_columns(str(tmp_path), convert=False)
    assert cols.torn_lines == 0 and cols.n == 3 + whole


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (b"a\nb\nhal", b"a\nb\n"),
        (b"a\n", b"a\n"),
        (b"torn", b""),
        (b"", b""),
        (b"x" * 70000 + b"\ny" * 3, None),
    ],
)
def test_whole_lines_cuts_after_the_last_newline(tmp_path, text: bytes, kept: bytes | None) -> None:
    p = tmp_path / "f.jsonl"
    p.write_bytes(text)
    whole_lines(str(p))
    assert p.read_bytes() == (kept if kept is not None else text[: text.rfind(b"\n") + 1])


def test_a_failed_atomic_write_leaves_no_tmp_file(tmp_path, monkeypatch) -> None:
    def full(_src: str, _dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        atomic.atomic_json(str(tmp_path / "progress.json"), {"ok": 1})
    assert os.listdir(tmp_path) == []


def test_the_reserve_holds_room_and_gives_it_back(tmp_path) -> None:
    path = str(tmp_path / ".reserve")
    st = os.statvfs(str(tmp_path))
    held = atomic.reserve_space(path, 1 << 20)
    assert 0 < held <= 1 << 20 and held <= st.f_bavail * st.f_frsize * 0.25
    assert os.path.getsize(path) == held
    atomic.release_reserve(path)
    assert not os.path.exists(path)
    atomic.release_reserve(path)  # twice: nothing to do


def test_the_master_holds_the_reserve_until_the_end_files(tmp_path) -> None:
    c = Collector(str(tmp_path))
    assert (tmp_path / ".end-files-reserve").exists()
    c.close()
    c.write_side_files()
    names = set(os.listdir(tmp_path))
    assert ".end-files-reserve" not in names and "histograms.json" in names
