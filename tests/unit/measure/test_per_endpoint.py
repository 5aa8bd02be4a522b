"""Per-endpoint and per-replica results: figures by hand, the imbalance, absent for one endpoint or replica."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from orchestration.report.summary import fleet_lines, format_summary
from tests.unit.measure.helpers import rec
from vllm_users.measure.columns import columns_from_records
from vllm_users.measure.metrics import Slo
from vllm_users.measure.per_endpoint import imbalance, per_endpoint, per_replica
from vllm_users.measure.record import parse_lines
from vllm_users.measure.result_builder import build_run_result
from vllm_users.measure.run_result import RunResult

T0 = 1_700_000_000.0
E1, E2, E3 = "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"
META = {"endpoints": [E1, E2, E3]}


def fleet() -> list[Any]:
    """E1: 4 requests, TTFT 20 ms, TPOT 10 ms (replicas r0, r1 by turns); E2: 2 requests, TTFT 60 ms, TPOT 30 ms
    (replica r0) and one refused (no replica: no answer); E3: nothing."""
    out = [rec(T0 + i, [20, 120], 11, host=E1, replica=f"r{i % 2}") for i in range(4)]
    out += [rec(T0 + 4 + i, [60, 360], 11, host=E2, replica="r0") for i in range(2)]
    out.append(rec(T0 + 6, [], None, host=E2, error="connection", status=0))
    return out


def test_each_endpoint_gets_its_figures_and_the_imbalance() -> None:
    res = per_endpoint(fleet(), None, META)
    assert res is not None and list(res["groups"]) == [E1, E2, E3]  # --host's order, an idle one included
    e1, e2, e3 = (res["groups"][e] for e in (E1, E2, E3))
    assert (e1["requests"], e1["completed"], e1["failed"]) == (4, 4, 0)
    assert (e2["requests"], e2["completed"], e2["failed"]) == (3, 2, 1)
    assert e2["errors_by_kind"] == {"connection": 1} and e1["errors_by_kind"] == {}
    assert e1["request_share"] == pytest.approx(4 / 6) and e2["request_share"] == pytest.approx(2 / 6)
    assert e1["median_ttft_ms"] == pytest.approx(20.0) and e2["median_ttft_ms"] == pytest.approx(60.0)
    assert e1["median_tpot_ms"] == pytest.approx(10.0) and e2["median_tpot_ms"] == pytest.approx(30.0)
    dur = 6.005  # first start to the refused request's end (5 ms after its start at T0 + 6)
    assert res["duration"] == pytest.approx(dur) and e1["request_throughput"] == pytest.approx(4 / dur)
    assert e3["requests"] == 0 and not any(k.endswith("_ms") for k in e3)  # absent, never 0
    imb = res["imbalance"]
    assert imb["idle"] == [E3]
    assert imb["request_share_max_over_min"] is None  # E3 got nothing: no finite ratio
    assert imb["median_ttft_max_over_min"] == pytest.approx(3.0)
    assert (imb["median_ttft_max"], imb["median_ttft_min"]) == (E2, E1)


def test_goodput_per_endpoint_with_an_slo() -> None:
    res = per_endpoint(fleet(), None, META, slo=Slo({"ttft": 50.0}))
    assert res is not None
    assert res["groups"][E1]["good"] == 4 and res["groups"][E2]["good"] == 0
    assert res["groups"][E1]["request_goodput"] == pytest.approx(4 / 6.005)


def test_imbalance_of_two_by_hand() -> None:
    imb = imbalance(
        {
            "a": {"request_share": 0.75, "median_ttft_ms": 10.0},
            "b": {"request_share": 0.25, "median_ttft_ms": 40.0},
        }
    )
    assert imb["request_share_max_over_min"] == pytest.approx(3.0) and imb["request_share_max"] == "a"
    assert imb["median_ttft_max_over_min"] == pytest.approx(4.0) and imb["median_ttft_max"] == "b"
    assert imb["idle"] == []


def test_one_endpoint_or_one_replica_has_no_block() -> None:
    one = [rec(T0 + i, [20, 120], 11) for i in range(3)]  # a run against one URL: host None
    assert per_endpoint(one, None, {}) is None and per_replica(one, None) is None
    same = [rec(T0 + i, [20, 120], 11, host=E1, replica="r0") for i in range(3)]
    assert per_endpoint(same, None, {"endpoints": [E1]}) is None and per_replica(same, None) is None
    doc = build_run_result(one, {}).to_json()
    assert "per_endpoint" not in doc and "per_replica" not in doc
    assert "Per endpoint" not in format_summary(doc) and "Per replica" not in format_summary(doc)


def test_replicas_of_one_endpoint_and_of_several() -> None:
    recs = [r for r in fleet() if r.host == E1]
    res = per_replica(recs, None)
    assert res is not None and list(res["groups"]) == ["r0", "r1"] and res["unnamed"] == 0
    assert res["groups"]["r0"]["completed"] == 2 and res["imbalance"]["request_share_max_over_min"] == 1.0
    both = per_replica(fleet(), None)  # r0 of E1 and r0 of E2 are different replicas
    assert both is not None
    assert list(both["groups"]) == [f"{E1} r0", f"{E1} r1", f"{E2} r0"]
    assert both["groups"][f"{E2} r0"]["median_ttft_ms"] == pytest.approx(60.0)
    assert both["unnamed"] == 1  # the refused request: no answer, no replica


def test_in_result_json_round_trip_and_summary() -> None:
    doc = build_run_result(fleet(), META).to_json()
    assert list(doc["per_endpoint"]["groups"]) == [E1, E2, E3] and "per_replica" in doc
    assert RunResult.from_json(doc).to_json() == doc
    assert "per_endpoint" not in RunResult.from_json(doc).metrics
    text = format_summary(doc)
    assert "Per endpoint" in text and "Per replica" in text
    lines = fleet_lines(doc["per_endpoint"], None)
    row = next(x for x in lines if x.startswith(E2))
    # endpoint, share, ok, fail, req/s, tok/s, TTFT p50/p99, TPOT p50/p99, ITL p99, E2EL p99, errors
    assert row.split()[:10] == [E2, "33%", "2", "1", f"{2 / 6.005:.2f}", f"{22 / 6.005:.1f}", "60.0/60.0", "30.0/30.0",
                                "300.0", "360.0"]  # fmt: skip
    assert row.endswith("errors: connection 1")
    assert any(x.startswith("imbalance:") and "3.00x" in x for x in lines)
    assert f"completed nothing: {E3}" in lines


def test_host_and_replica_columns_and_json_lines() -> None:
    recs = fleet()
    c = columns_from_records(recs)
    everyone = np.arange(c.n)
    assert c.strings("host", everyone) == [r.host for r in recs]
    assert c.strings("replica", everyone) == [r.replica for r in recs]
    assert "host" not in rec(T0, [20], 1).to_json() and "replica" not in rec(T0, [20], 1).to_json()
    line = recs[0].to_json()
    assert f'"host":"{E1}"' in line and '"replica":"r0"' in line
    assert parse_lines([line])[0][0] == recs[0]
