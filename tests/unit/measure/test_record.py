"""Reading records.jsonl: the same records back, unknown keys tolerated, torn lines counted."""

from __future__ import annotations

import json

from tests.unit.measure.helpers import rand_records
from vllm_users.measure.record import read_records


def test_read_records_fast_path_same_records_and_torn_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    recs = rand_records(50, 1)
    p = tmp_path / "r.jsonl"
    lines = [r.to_json() for r in recs]
    extra = json.loads(lines[0])
    extra["future_field"] = 1  # unknown keys still go through from_dict
    lines.append(json.dumps(extra))
    lines += ["", "[1, 2]", "42"]
    p.write_bytes(("\n".join(lines) + "\n").encode() + b'{"scenario": "\xe2\x82')  # torn multi-byte tail
    got, bad = read_records(str(p))
    assert got[:50] == recs and got[50] == recs[0]
    assert bad == 3
