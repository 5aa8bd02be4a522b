"""The find-max-rate half of the offline twin check (benchmarks/twin_offline.py): each recorded search step
replayed through the twin and judged by the search's own verdict, and the twin's own search in virtual time.

A twin step is written as a run directory (records.cols and the server step's run_meta.json) and judged by
orchestration.capacity.search.judge, the function that judged the server's step, so a verdict here is the one the
device's search would give the twin on the same arrivals.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import tempfile
from typing import Any

import numpy as np

from orchestration.capacity.search import (
    PROBE_REQUESTS,
    STEP_MAX,
    STEP_MIN,
    STEP_SECONDS,
    judge,
    next_rate,
)
from orchestration.twin.replay import Served, replay
from vllm_users.measure.columns import frame, pack_records
from vllm_users.measure.metrics import Slo
from vllm_users.measure.record import RequestRecord
from vllm_users.measure.records_store import load_columns
from vllm_users.measure.result_builder import build_result
from vllm_users.run_dir import COLS, META

__all__ = ["recorded_steps", "replay_step", "twin_search"]

_EPOCH = 1.8e9  # the twin's records' start (epoch seconds): any fixed time will do


def recorded_steps(round_dir: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A recorded search round (server-K/): its search.json, and each step with its arrivals (seconds from the
    step's first), prompt and output tokens, read from the step's records (records.cols)."""
    with open(os.path.join(round_dir, "search.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    steps = []
    for s in doc["steps"]:
        run = os.path.join(round_dir, s["name"])
        cols = load_columns(run, convert=False)
        ok = cols.a["status"] == 200
        start = cols.a["t_start"][ok]
        intended = cols.a["t_intended"][ok]
        sched = np.where(np.isnan(intended), start, intended)
        with open(os.path.join(run, META), encoding="utf-8") as fh:
            meta = json.load(fh)
        steps.append(
            {
                "name": s["name"],
                "target": s["target"],
                "verdict": s["verdict"],
                "reasons": (s.get("judgement") or {}).get("reasons"),
                "achieved_rate": s.get("achieved_rate"),
                "arrivals_s": (sched - sched.min()).tolist() if sched.size else [],
                "prompts": cols.a["prompt_tokens"][ok].astype(int).tolist(),
                "outputs": cols.a["output_tokens"][ok].astype(int).tolist(),
                "meta": meta,
            }
        )
    return doc, steps


def _records(served: list[Served], open_loop: bool) -> list[RequestRecord]:
    out = []
    for k, s in enumerate(served):
        t0 = _EPOCH + s.sent_s
        out.append(
            RequestRecord(
                scenario="twin",
                worker="twin",
                user=k,
                seq=k,
                endpoint="chat",
                t_start=t0,
                t_intended=t0 if open_loop else None,
                chunk_times_us=[round((c - s.sent_s) * 1e6) for c in s.chunk_s],
                end_us=round((s.end_s - s.sent_s) * 1e6),
                prompt_tokens=s.prompt,
                output_tokens=s.output,
                input_len=s.prompt,
                output_len=s.output,
                finish_reason="length",
                status=200,
            )
        )
    return out


def _write_run(where: str, served: list[Served], meta: dict[str, Any], open_loop: bool) -> str:
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, COLS), "wb") as fh:
        fh.write(frame(pack_records(_records(served, open_loop)), 0, 0))
    with open(os.path.join(where, META), "w", encoding="utf-8") as fh:
        json.dump(meta, fh)
    return where


def replay_step(
    c: dict[str, dict[str, Any]],
    path: dict[str, Any] | None,
    step: dict[str, Any],
    slo: Slo,
    percentile: float,
    max_error_rate: float,
    work: str,
) -> dict[str, Any]:
    """One recorded step's arrivals through the twin, judged as the search judged the server's."""
    served = replay(c, step["prompts"], step["outputs"], arrivals_s=step["arrivals_s"], path=path)
    run = _write_run(os.path.join(work, step["name"]), served, step["meta"], True)
    if step["target"] is None:  # the throughput probe: its achieved rate, no verdict
        return {"passed": None, "achieved_rate": _throughput(run, step["meta"])}
    return judge(run, float(step["target"]), slo, percentile, max_error_rate)


def _throughput(run: str, meta: dict[str, Any]) -> float | None:
    got = build_result(load_columns(run, convert=False), meta).get("request_throughput")
    return float(got) if got else None


def twin_search(
    c: dict[str, dict[str, Any]],
    path: dict[str, Any] | None,
    prompt: int,
    output: int,
    meta: dict[str, Any],
    slo: Slo,
    percentile: float,
    max_error_rate: float,
    *,
    seed: int,
    steps: int = 8,
    tolerance: float = 0.025,
) -> dict[str, Any]:
    """The twin's own --find-max-rate in virtual time, by the search's rules (orchestration.capacity.search): a
    probe of every request at once, then steps of rate x 10 s Poisson arrivals (30 to 300), next_rate between
    them, until the bracket is within `tolerance` or `steps` are spent."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="twin-search-") as work:
        n = PROBE_REQUESTS
        probe = replay(c, [prompt] * n, [output] * n, arrivals_s=[0.0] * n, path=path)
        capacity = _throughput(_write_run(os.path.join(work, "probe"), probe, meta, True), meta)
        if not capacity:
            return {"max_rate": None, "lowest_failing_rate": None, "steps": []}
        rate, lo, hi, failures, kept = round(capacity, 3), None, None, 0, None
        rows: list[dict[str, Any]] = [{"target": None, "achieved_rate": capacity}]
        while len(rows) < steps:
            count = int(min(STEP_MAX, max(STEP_MIN, round(rate * STEP_SECONDS))))
            at, arrivals = 0.0, []
            for _ in range(count):
                at += rng.expovariate(rate)
                arrivals.append(at)
            served = replay(c, [prompt] * count, [output] * count, arrivals_s=arrivals, path=path)
            run = _write_run(os.path.join(work, f"step-{len(rows) + 1}"), served, meta, True)
            v = judge(run, rate, slo, percentile, max_error_rate)
            rows.append({"target": rate, "passed": v["passed"], "reasons": v["reasons"]})
            if v["passed"]:
                lo = rate if lo is None else max(lo, rate)
            else:
                failures += 1
                hi = rate if hi is None else min(hi, rate)
                kept = v.get("achieved_completion_rate")
            if lo is not None and hi is not None and (hi - lo) <= tolerance * lo:
                break
            rate = round(next_rate(lo, hi, failures, kept), 3)
    return {"probe_capacity_rps": capacity, "max_rate": lo, "lowest_failing_rate": hi, "steps": rows}


def median_prompt(steps: list[dict[str, Any]]) -> tuple[int, int]:
    """The recorded steps' median prompt and output tokens (the search's --input-len as the server counted it)."""
    prompts = [p for s in steps for p in s["prompts"]]
    outputs = [o for s in steps for o in s["outputs"]]
    if not prompts:
        raise ValueError("no recorded request in the search steps")
    return round(statistics.median(prompts)), round(statistics.median(outputs))


def finite(x: float | None) -> float | None:
    """`x` where it is a finite number, else None (a number that does not apply is absent)."""
    return x if x is not None and math.isfinite(x) else None
