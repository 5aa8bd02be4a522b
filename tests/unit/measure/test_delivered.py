"""The load that was applied, judged on labelled runs: an open loop against a server of known capacity
(`slots` parallel requests of `service_s` each, FIFO). Offered below the capacity: delivered, at every length
and seed (no false alarm); offered well above it: flagged, achieved at the capacity (no miss); a closed loop has
no offered rate. Today's summary said nothing when `--request-rate 20` achieved 12.71 req/s."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import as_columns
from vllm_users.measure.delivered import DELIVERY_TOLERANCE, delivery, shortfall_text, steady_rows
from vllm_users.measure.metrics import ok_rows, rows
from vllm_users.measure.record import RequestRecord
from vllm_users.measure.result_fields import build_metrics

T0 = 1_700_000_000.0


def open_loop(
    rate: float,
    n: int,
    *,
    slots: int = 8,
    service_s: float = 0.4,
    cap: int = 0,
    seed: int = 0,
    batched: bool = False,
) -> list[RequestRecord]:
    """Poisson arrivals at `rate` against `slots` servers; with `cap` the client holds a request until one of its
    `cap` in flight ends (--max-concurrency: it starts late), else the server queues it (its TTFT grows).
    `batched`: a request's service time grows with the requests in service when it begins (a batch's decode
    step), so the first requests (an empty batch) and the last (a draining one) are answered faster."""
    rng = np.random.default_rng(seed)
    due = T0 + np.cumsum(rng.exponential(1.0 / rate, n))
    free = [T0] * slots  # when each server slot is next free
    in_flight: list[float] = []  # ends of the client's requests in flight (the cap)
    out = []
    for i, t in enumerate(due):
        start = float(t)
        if cap:
            while len(in_flight) >= cap:
                start = max(start, heapq.heappop(in_flight))
        begin = max(start, heapq.heappop(free))  # the server's queue
        busy = sum(f > begin for f in free) + 1
        scale = (0.3 + 0.7 * busy / slots) if batched else 1.0
        end = begin + scale * service_s * (0.9 + 0.2 * rng.random())
        heapq.heappush(free, end)
        if cap:
            heapq.heappush(in_flight, end)
        ttft_us = int((begin - start) * 1e6) + 20_000
        out.append(
            RequestRecord(
                scenario="chat", worker="w0", user=0, seq=i, endpoint="chat", t_start=start,
                t_intended=float(t), chunk_times_us=[ttft_us, int((end - start) * 1e6)],
                end_us=int((end - start) * 1e6) + 100, prompt_tokens=10, output_tokens=16, status=200,
                finish_reason="length",
            )
        )  # fmt: skip
    return out


def _delivery(recs: list[RequestRecord]) -> dict | None:  # type: ignore[type-arg]
    c = as_columns(recs)
    return delivery(c, ok_rows(c, rows(c)))


CAPACITY = 8 / 0.4  # 20 req/s


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("n", [30, 60, 200, 400])
@pytest.mark.parametrize("load", [0.3, 0.6, 0.8])
def test_a_server_with_room_delivers_at_every_length(n: int, load: float, batched: bool) -> None:
    """No false alarm, and the achieved rate within 10 % of the offered: 20 seeds of each, below the capacity.
    With batched service (faster answers as the batch drains) completions over a window shifted by the median
    latency read 119 % of the offered rate in a live search step."""
    for seed in range(20):
        d = _delivery(open_loop(load * CAPACITY, n, seed=seed, batched=batched))
        assert d is not None and d.get("delivered", True), (n, load, seed, d)
        assert shortfall_text(d) is None
        if n >= 200:  # long enough for the latency's trend to be read within the tolerance
            assert d["achieved_fraction"] == pytest.approx(1.0, abs=DELIVERY_TOLERANCE)
        if "delivered" not in d:  # too few in the interior to judge
            assert n < 60


@pytest.mark.parametrize("n", [100, 200, 400])
@pytest.mark.parametrize("cap", [0, 64])
def test_an_overloaded_server_is_flagged_at_its_capacity(n: int, cap: int) -> None:
    """No miss: offered 1.6 x the capacity (a queue at the server, or at a --max-concurrency cap), flagged every
    time, the achieved rate read at the capacity."""
    for seed in range(10):
        d = _delivery(open_loop(1.6 * CAPACITY, n, cap=cap, seed=seed))
        assert d is not None and not d["delivered"], (n, cap, seed, d)
        assert d["achieved_rate"] == pytest.approx(CAPACITY, rel=0.12)
        assert d["offered_rate"] == pytest.approx(1.6 * CAPACITY, rel=0.3)  # the schedule's own draw
        text = shortfall_text(d)
        assert text is not None and text.endswith("not delivered") and "of the offered" in text


def test_a_closed_loop_states_its_concurrency_and_no_offered_rate() -> None:
    recs = open_loop(10, 100)
    for r in recs:
        r.t_intended = None
    d = _delivery(recs)
    assert d is not None and "offered_rate" not in d and "delivered" not in d and shortfall_text(d) is None
    # Little's law: 10 req/s x 0.4 s in flight
    assert d["achieved_concurrency"] == pytest.approx(4.0, rel=0.2)


def test_too_few_requests_have_no_delivery_block() -> None:
    assert _delivery(open_loop(5, 8)) is None
    assert steady_rows(np.arange(5.0), np.arange(5.0) + 1, np.ones(5)) is None
    assert "delivered" not in (_delivery(open_loop(5, 20)) or {})  # too few to judge: no verdict


def test_the_result_and_goodput_against_the_offered_load() -> None:
    """result.json's `delivery`; the goodput against the offered load where the goodput against the completions
    read 100 %."""
    from vllm_users.measure.metrics import Slo

    res, *_ = build_metrics(open_loop(1.6 * CAPACITY, 300, cap=64), slo=Slo.parse(["e2el:100000"]))
    d = res[K.DELIVERY]
    assert res[K.GOODPUT]["good_fraction"] == 1.0
    assert (
        d["goodput_of_offered"] == pytest.approx(d["achieved_fraction"], rel=0.01)
        and d["goodput_of_offered"] < 0.8
    )
    assert d[K.OUTPUT_THROUGHPUT] == pytest.approx(16 * d["achieved_rate"], rel=0.01)
