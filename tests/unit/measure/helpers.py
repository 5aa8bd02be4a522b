"""Records for the core tests: `rec` (hand-made, times in ms), `rand_records` (every field and error kind)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from vllm_users.measure.record import ERROR_KINDS, RequestRecord


def rec(
    t_start: float, chunks_ms: list[float], out: int | None, prompt: int = 10, **kw: Any
) -> RequestRecord:
    """A record starting at `t_start` with output chunks at `chunks_ms`; the body ends 1 ms after the last
    chunk (5 ms after the start without chunks) unless `end_us` is given."""
    us = [round(c * 1000) for c in chunks_ms]
    kw.setdefault("end_us", (us[-1] + 1000) if us else 5000)
    return RequestRecord(
        scenario=kw.pop("scenario", "chat"),
        worker="w",
        user=0,
        seq=0,
        endpoint=kw.pop("endpoint", "chat"),
        t_start=t_start,
        chunk_times_us=us,
        prompt_tokens=prompt,
        output_tokens=out,
        **kw,
    )


def rand_records(
    n: int, seed: int, *, open_loop: bool = False, scenarios: tuple[str, ...] = ("chat",)
) -> list[RequestRecord]:
    """Random records: every error kind, None tokens, one-chunk outputs, turns, validity, cached tokens."""
    rng = random.Random(seed)
    out = []
    t = 1_700_000_000.0
    for i in range(n):
        t += rng.expovariate(50.0)
        kind = rng.random()
        err: str | None = None
        if kind < 0.08:
            err = rng.choice([k for k in ERROR_KINDS if k != "dropped"])
        elif open_loop and kind < 0.12:
            err = "dropped"
        nch = 0 if err in ("http", "connection", "dropped") else rng.choice([1, 1, 2, 3, 17, 64])
        c0 = rng.randint(100, 80_000)
        chunks = [c0]
        for _ in range(nch - 1):
            chunks.append(chunks[-1] + rng.randint(0, 30_000))
        chunks = chunks[:nch]
        none_tokens = rng.random() < 0.1
        out.append(
            RequestRecord(
                scenario=rng.choice(scenarios) if err != "dropped" else "-",
                worker=f"w{i % 3}",
                user=i % 7,
                seq=i,
                endpoint="chat" if err != "dropped" else "-",
                t_start=t,
                t_intended=(t - rng.random() * 0.05) if open_loop else None,
                chunk_times_us=chunks,
                end_us=(chunks[-1] + rng.randint(0, 2000))
                if chunks
                else (0 if err == "dropped" else rng.randint(1, 9000)),
                prompt_tokens=None if none_tokens else rng.randint(1, 500),
                output_tokens=None if none_tokens else max(0, nch + rng.randint(-1, 3)),
                cached_tokens=rng.choice([None, 0, rng.randint(0, 100)]),
                tokens_estimated=rng.random() < 0.1,
                finish_reason=rng.choice([None, "stop", "length"]),
                status=500 if err == "http" else 200,
                error=err,
                error_detail="x" if err else None,
                input_len=rng.choice([None, 128]),
                output_len=rng.choice([None, 64]),
                turn=rng.choice([None, 0, 1, 2]),
                session=rng.choice([None, i // 3]),
                valid=rng.choice([None, True, False]),
            )
        )
    return out


def assert_same(a: Any, b: Any, path: str = "", rel: float = 1e-12) -> None:
    """Equal field by field; floats to `rel` (NaN == NaN); dict key order included."""
    if isinstance(a, dict):
        assert isinstance(b, dict), path
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}", rel)
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]", rel)
    elif isinstance(a, float) and not isinstance(b, bool):
        assert isinstance(b, float | int), f"{path}: {a!r} vs {b!r}"
        if math.isnan(a):
            assert math.isnan(b), path
        else:
            assert b == pytest.approx(a, rel=rel, abs=1e-12), f"{path}: {a!r} vs {b!r}"
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} vs {b!r}"


def assert_reads_what_the_jsonl_kept(d: str, recs: list[RequestRecord], keep: int) -> None:
    """records.jsonl cut after `keep` records (its buffered tail lost in a kill, the columns having it): the one
    reader follows the JSONL, and the result is that of the first `keep` records."""
    import os

    from vllm_users.measure.records_store import load_columns
    from vllm_users.measure.result_builder import build_result

    with open(os.path.join(d, "records.jsonl"), "r+b") as fh:
        fh.truncate(sum(len(r.to_json()) + 1 for r in recs[:keep]))
    c = load_columns(d)
    assert c.n == keep
    meta = {"model_id": "m", "date": "d"}
    assert_same(build_result(recs[:keep], meta), build_result(c, meta))
