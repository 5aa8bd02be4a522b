"""The vectorised metric paths give bit-identical results to the original per-record loops (kept here)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from vllm_users import metrics
from vllm_users.record import RequestRecord


def _ref_metric_arrays(ok: list[RequestRecord]) -> dict[str, np.ndarray]:
    """The original implementation (before the fast path), verbatim in substance."""
    ttft = np.fromiter((r.chunk_times_us[0] for r in ok), dtype=np.float64, count=len(ok)) / 1e6
    e2el = np.fromiter((r.chunk_times_us[-1] for r in ok), dtype=np.float64, count=len(ok)) / 1e6
    tpots = [t for t in (metrics.tpot_s(r) for r in ok) if t is not None]
    n_itl = sum(len(r.chunk_times_us) - 1 for r in ok)
    if n_itl:
        flat = np.fromiter((t for r in ok for t in r.chunk_times_us), dtype=np.int64)
        lens = np.fromiter((len(r.chunk_times_us) for r in ok), dtype=np.int64, count=len(ok))
        gaps = np.diff(flat)
        firsts = np.cumsum(lens)[:-1] - 1
        mask = np.ones(gaps.size, dtype=bool)
        mask[firsts] = False
        itl = gaps[mask] / 1e6
    else:
        itl = np.zeros(0)
    return {"ttft": ttft, "tpot": np.asarray(tpots, dtype=np.float64), "itl": itl, "e2el": e2el}


def _ref_peak(ok: list[RequestRecord]) -> float:
    if not ok:
        return 0.0
    t0 = min(r.t_start for r in ok)
    bucket_tokens: Counter[int] = Counter()
    for r in ok:
        n = len(r.chunk_times_us)
        per_chunk = (r.output_tokens or n) / n
        base = r.t_start - t0
        for c in r.chunk_times_us:
            bucket_tokens[int(base + c / 1e6)] += per_chunk
    return float(max(bucket_tokens.values()))


def _random_records(seed: int, n: int = 400) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.choice([1, 2, 3, 17, 64]))
        chunks = np.cumsum(rng.integers(1, 50_000, k)).tolist()
        out.append(RequestRecord(
            scenario="a" if i % 3 else "b", worker="w", user=i % 7, seq=i, endpoint="chat",
            t_start=1.7e9 + float(rng.random() * 30), chunk_times_us=chunks, end_us=chunks[-1] + 10,
            prompt_tokens=int(rng.integers(1, 300)),
            output_tokens=[None, 0, 1, k, 3 * k][int(rng.integers(0, 5))], tokens_estimated=bool(i % 5 == 0),
        ))  # fmt: skip
    return out


@pytest.mark.parametrize("seed", range(5))
def test_fast_paths_are_identical(seed: int) -> None:
    ok = _random_records(seed)
    new, ref = metrics._metric_arrays(ok), _ref_metric_arrays(ok)
    for k in ref:
        assert np.array_equal(new[k], ref[k]), k
    assert metrics.peak_output_tokens_per_s(ok) == _ref_peak(ok)


def test_empty_and_single_chunk() -> None:
    assert metrics.peak_output_tokens_per_s([]) == 0.0
    one = _random_records(0, 1)
    one[0].chunk_times_us = [5]
    for k, v in _ref_metric_arrays(one).items():
        assert np.array_equal(metrics._metric_arrays(one)[k], v)
    res = metrics.compute_metrics([])
    assert res["completed"] == 0 and res["median_itl_ms"] == 0.0


def test_read_records_fast_path_same_records_and_torn_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from vllm_users.record import read_records

    recs = _random_records(1, 50)
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
