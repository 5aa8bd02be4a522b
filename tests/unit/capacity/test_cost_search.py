"""Cost arithmetic, the search's next rate, its saturation watch and a step's verdict from crafted records."""

from __future__ import annotations

import json
import os

import pytest

from orchestration.capacity import search as S
from orchestration.report.summary import format_summary
from tests.unit.report.helpers import make_records, write_run
from vllm_users import run_dir
from vllm_users.measure.cost import cost_at, format_cost, run_cost
from vllm_users.measure.metrics import Slo
from vllm_users.options import build, changed


def test_cost() -> None:
    # $4/GPU-hour x 2 GPUs = $8/h = $0.002222/s; 1000 tok/s -> $2.222 per million tokens; 5 req/s -> $0.000444
    c = cost_at(4.0, 2, 1000.0, 5.0)
    assert c["usd_per_million_output_tokens"] == pytest.approx(8 / 3600 / 1000 * 1e6)
    assert c["usd_per_request"] == pytest.approx(8 / 3600 / 5)
    assert cost_at(4.0, 1, 0.0, None)["usd_per_million_output_tokens"] is None
    res = {"output_throughput": 1000.0, "request_throughput": 5.0, "completed": 1}
    res["cost"] = run_cost(res, 4.0, 2)
    text = format_summary(res)
    assert "Cost at $4/GPU-hour x 2 GPU(s):" in text and "$2.222 per 1M output tokens" in text
    assert any(
        "SLO-max rate" in x
        for x in format_cost({**res["cost"], "at_slo_max_rate": cost_at(4.0, 2, 2000.0, 9.0)})
    )


def test_next_rate() -> None:
    assert S.next_rate(None, 20.0, 1) == 18.0  # first failure: 90 %
    assert S.next_rate(None, 18.0, 2) == 9.0  # then halve
    assert S.next_rate(18.0, 20.0, 1) == 19.0  # bisect
    assert S.next_rate(20.0, None, 0) == 25.0  # all passed: go higher
    assert S.next_rate(None, 20.0, 1, kept_up=15.0) == pytest.approx(14.55)  # just under what it kept up
    assert S.next_rate(None, 20.0, 1, kept_up=19.5) == 18.0


def test_watch() -> None:
    w = S.SaturationWatch(Slo({"ttft": 100.0}), 7.0)
    assert w({"elapsed_s": 0.5, "inflight": 0}) is None
    assert (
        w({"elapsed_s": 4.6, "inflight": 9, "ok": 30}) is None
    )  # no latency measured yet (no e2el_sum_s): nothing to judge the in-flight count by


def _watch_model(rate: float, latency_s: float, seats: float, seconds: float = 30.0) -> str | None:
    """A step at `rate` against a server of `seats` requests of `latency_s` each, sampled every 0.5 s (fluid, first
    come first served: the request sent at a is answered at latency_s + a x rate / (the rate it answers))."""
    w = S.SaturationWatch(Slo({"ttft": 1e9}), rate)
    served = min(rate, seats / latency_s)
    for k in range(1, int(seconds / 0.5) + 1):
        t = 0.5 * k
        sent_by = max(0.0, t - latency_s) * served / rate  # the requests answered by t were sent by then
        done = rate * sent_by
        total = rate * (
            sent_by * latency_s + (rate / served - 1) * sent_by**2 / 2
        )  # their latencies added up
        why = w({"elapsed_s": t, "inflight": rate * t - done, "ok": done, "e2el_sum_s": total})
        if why:
            return f"{t:g}: {why}"
    return None


def test_watch_waits_out_the_ramp_of_long_requests() -> None:
    # 4 req/s of 5-s requests (256 tokens at 20 ms) on a server with room for them: the in-flight count climbs
    # from 4 to 20 over the first 5 s (Little's law), which is no saturation. It was stopped at 5 s before.
    assert _watch_model(4.0, 5.0, seats=64) is None
    assert _watch_model(16.0, 0.25, seats=8) is None  # short requests just under capacity (32 req/s)
    # over-saturated, twice the capacity: stopped within the step's 10 s of arrivals
    assert "over-saturated" in (_watch_model(64.0, 0.25, seats=8, seconds=10.0) or "")
    assert "over-saturated" in (_watch_model(16.0, 1.0, seats=8, seconds=10.0) or "")
    # (the queue model of test_saturation_watch.py adds Poisson arrivals, and requests of 3 and 5 s)
    w = S.SaturationWatch(Slo({"ttft": 100.0}))
    assert (
        w({"elapsed_s": 1.0, "inflight": 2, "ok": 60, "chat_ttft_p50_ms": 250.0, "chat_ttft_p99_ms": 900.0})
        is None
    )
    assert "already failed" in (
        w({"elapsed_s": 2.0, "inflight": 2, "ok": 60, "chat_ttft_p50_ms": 350.0}) or ""
    )


def test_judge(tmp_path: str) -> None:
    slo = Slo({"ttft": 100.0})
    good = write_run(os.path.join(tmp_path, "good"), make_records(200, ttft_ms=20.0))
    v = S.judge(good, 5.0, slo, 99.0, 0.01)
    assert v["passed"], v
    ci = v["slo_ci_ms"]["ttft"]  # where a repeat of the step's p99 would land: all 200 at 20 ms, clear of 100
    assert ci["n"] == 200 and ci["side"] == "under" and ci["low"] <= v["slo_values_ms"]["ttft"] <= ci["high"]
    # a tail above the SLO at p99, failures above 1 %, and an early stop each fail the step
    tail = write_run(os.path.join(tmp_path, "tail"), make_records(200, tail_every=20, tail_ms=500.0, fail=4))
    v = S.judge(tail, 5.0, slo, 99.0, 0.01)
    assert (
        not v["passed"]
        and any("p99 TTFT" in r for r in v["reasons"])
        and any("failure rate" in r for r in v["reasons"])
    )
    assert v["slo_ci_ms"]["ttft"]["side"] == "over"  # one request in 20 at 500 ms: its p99 over 100 for sure
    assert S.judge(tail, 5.0, slo, 90.0, 0.05)["slo_values_ms"]["ttft"] < 100  # p90 is below the tail
    with open(os.path.join(good, run_dir.EARLY_STOP), "w") as fh:
        json.dump({"reason": "in-flight requests grew"}, fh)
    assert "stopped early: in-flight requests grew" in S.judge(good, 5.0, slo, 99.0, 0.01)["reasons"]


def test_judge_sees_rising_ttft(tmp_path: str) -> None:
    recs = make_records(300, ttft_ms=20.0, concurrency=8)
    recs.sort(key=lambda r: r.t_start)
    for i, r in enumerate(recs):  # a queue that grows: each later request waits longer
        extra = int(i * 2000)
        r.chunk_times_us = [c + extra for c in r.chunk_times_us]
        r.end_us += extra
    run = write_run(os.path.join(tmp_path, "rising"), recs)
    v = S.judge(run, 1000.0, Slo({"ttft": 10_000.0}), 99.0, 0.01)
    assert any("TTFT rising" in r for r in v["reasons"])  # a rate not kept: test_judge_takes_the_rate_...


def test_judge_calls_a_late_client_invalid(tmp_path: str) -> None:
    recs = make_records(200, ttft_ms=20.0)
    for i, r in enumerate(recs):  # an open-loop schedule; every 10th arrival sent 300 ms late
        r.t_intended = r.t_start - (0.3 if i % 10 == 0 else 0.02)  # 20 ms late is under half a gap at 5 req/s
    run = write_run(os.path.join(tmp_path, "late"), recs)
    v = S.judge(run, 5.0, Slo({"ttft": 100.0}), 99.0, 0.01)
    assert (
        v["invalid"] and not v["passed"] and "client behind its schedule: 10% of arrivals" in v["reasons"][-1]
    )


def _open_loop(n: int, gaps_s: list[float], e2el_extra_ms: float = 0.0) -> list:  # type: ignore[type-arg]
    """`n` records sent on an open-loop schedule with these gaps (cycled); request i takes i x e2el_extra_ms more."""
    recs = make_records(n, ttft_ms=20.0, itl_ms=2.0, tokens=8, concurrency=1)
    t = 1_700_000_000.0
    for i, r in enumerate(recs):
        r.t_intended = r.t_start = t
        t += gaps_s[i % len(gaps_s)]
        extra = int(i * e2el_extra_ms * 1000)
        r.chunk_times_us = [c + extra for c in r.chunk_times_us]
        r.end_us = r.chunk_times_us[-1]
    return recs


def test_judge_takes_the_rate_the_arrivals_offered(tmp_path: str) -> None:
    # 30 arrivals at a realized 4 req/s against a 5 req/s target (a Poisson step's own luck: 1/sqrt(30) = 18 %),
    # every request answered in ~34 ms: the server kept up, the step holds. Against the target it failed
    # ("achieved 3.86 req/s < 90% of the target 5").
    slo = Slo({"ttft": 100.0})
    kept = write_run(os.path.join(tmp_path, "kept"), _open_loop(30, [0.25]))
    v = S.judge(kept, 5.0, slo, 99.0, 0.01)
    assert v["passed"], v["reasons"]
    assert v["offered_rate"] == pytest.approx(4.0, rel=1e-6) and v[
        "achieved_completion_rate"
    ] == pytest.approx(4.0, rel=0.05)
    # the same arrivals, each answered 60 ms later than the one before (a queue that grows): the server fell
    # behind the offered rate (completions at 1 / (0.25 + 0.06) = 3.2 req/s < 90 % of 4.0)
    behind = write_run(os.path.join(tmp_path, "behind"), _open_loop(30, [0.25], e2el_extra_ms=60.0))
    v = S.judge(behind, 5.0, Slo({"ttft": 10_000.0}), 99.0, 0.01)
    assert any("of the offered 4.00" in r for r in v["reasons"]), v["reasons"]


def test_judge_counts_the_step_interior_so_edges_cannot_only_cross_out(tmp_path: str) -> None:
    # a twin's step on the GPU-less box, as it came: 30 arrivals at 1.54 req/s, every request answered in 160 or
    # 250 ms (two output lengths), the first one fast and the last two slow. Over the whole step the first and
    # the last two answers fell outside the window shifted by the median latency (none can fall in), and the
    # step "achieved 1.38 of 1.54 req/s" and failed; over the interior it holds.
    gaps = [0.6] * 26 + [0.2, 0.06, 0.06]
    recs = _open_loop(30, gaps)
    for i, r in enumerate(recs):
        late = i >= 27 or (
            i % 2 == 1 and i > 0
        )  # 250 ms answers: odd requests and the last three; 160 ms others
        scale = (250.0 if late else 160.0) / (r.end_us / 1000.0)
        r.chunk_times_us = [int(c * scale) for c in r.chunk_times_us]
        r.end_us = r.chunk_times_us[-1]
    run = write_run(os.path.join(tmp_path, "edges"), recs)
    v = S.judge(run, 1.854, Slo({"ttft": 10_000.0}), 99.0, 0.01)
    assert v["passed"], v["reasons"]
    assert v["achieved_completion_rate"] == pytest.approx(v["offered_rate"], rel=0.05)


def test_each_step_draws_its_own_prompts(tmp_path: str) -> None:
    # every step of a search / sweep / repeats against one server: its own seed (a prefix cache would answer
    # the later steps from the first one's prompts), reproducible; sweep-server keeps the parent's
    from orchestration.capacity.repeats import run_repeats
    from orchestration.capacity.steps import REPEAT_STRIDE, step_seed
    from orchestration.capacity.sweep import run_sweep
    from vllm_users.options import Options

    seen: list[int] = []

    def run_one(b: Options, watch: object = None) -> int:
        seen.append(b.request.seed)
        return 0

    base = build(host="http://127.0.0.1:9", seed=7, output_dir=str(tmp_path), no_report=True)
    run_repeats(changed(base, repeats=3, run_name="rep"), run_one)
    assert seen == [7, 8, 9]
    seen.clear()
    run_sweep(changed(base, sweep="concurrency:1,2,4", run_name="sw"), run_one)
    assert seen == [7, 1007, 2007] == [step_seed(base.request, k) for k in range(3)]
    assert step_seed(base.request, 2, REPEAT_STRIDE) == 9
