"""Per-class results: counts, shares, goodput against each class's own SLO, Jain's index, `valid`."""

from __future__ import annotations

import pytest

from tests.unit.measure.helpers import rec
from vllm_users.measure.metrics import Slo
from vllm_users.measure.per_class import jain_index, per_class
from vllm_users.measure.result_builder import build_run_result
from vllm_users.measure.run_result import RunResult

T0 = 1_700_000_000.0


def test_jain_index_by_hand() -> None:
    assert jain_index([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0]) == pytest.approx(0.5)  # one takes all of two: 1/n
    # (1 + 2 + 3)^2 / (3 * (1 + 4 + 9)) = 36 / 42
    assert jain_index([1.0, 2.0, 3.0]) == pytest.approx(36 / 42)
    assert jain_index([]) is None and jain_index([0.0, 0.0]) is None


def two_classes() -> list:
    """chat (weight 3, TTFT 100 ms): 3 requests, TTFT 50, 80, 300 ms -> 2 good; batch (weight 1, no SLO of its own):
    2 requests, one failed. Requests at t = 0..4 s, each 1 s long at most: the duration is 4.x s."""
    out = []
    for i, ttft in enumerate((50, 80, 300)):
        out.append(rec(T0 + i, [ttft, ttft + 100], 2, request_class="chat"))
    out.append(rec(T0 + 3, [20, 900], 10, request_class="batch"))
    out.append(rec(T0 + 4, [], None, request_class="batch", error="http", status=500))
    return out


TABLE = [{"name": "chat", "weight": 3.0, "ttft": 100.0, "priority": 0}, {"name": "batch", "weight": 1.0}]


def test_per_class_counts_shares_and_goodput() -> None:
    recs = two_classes()
    res = per_class(recs, None, TABLE)
    assert res is not None
    dur = res["duration"]
    assert dur == pytest.approx(4.005)  # first start to the last response's end (the failed one: 5 ms)
    chat, batch = res["per_class"]["chat"], res["per_class"]["batch"]
    assert (chat["requests"], chat["completed"], chat["failed"]) == (3, 3, 0)
    assert (batch["requests"], batch["completed"], batch["failed"]) == (2, 1, 1)
    assert chat["weight_share"] == 0.75 and batch["weight_share"] == 0.25
    assert chat["request_share"] == 0.75 and batch["request_share"] == 0.25
    assert chat["output_token_share"] == pytest.approx(6 / 16) and batch[
        "output_token_share"
    ] == pytest.approx(10 / 16)
    assert (
        chat["slo_ms"] == {"ttft": 100.0}
        and chat["good"] == 2
        and chat["good_fraction"] == pytest.approx(2 / 3)
    )
    assert batch["slo_ms"] == {} and batch["good"] == 1  # no SLO: every success is good
    assert chat["request_goodput"] == pytest.approx(2 / dur) and chat["priority"] == 0
    assert chat["p99_ttft_ms"] == pytest.approx(80 + 0.98 * (300 - 80))  # linear interpolation, rank 1.98
    assert chat["median_ttft_ms"] == pytest.approx(80.0) and batch["median_e2el_ms"] == pytest.approx(900.0)
    assert "p50_ttft_ms" in chat and "p99_e2el_ms" in chat and "p90_tpot_ms" in chat
    # weight-normalised goodput: chat 2/dur/3, batch 1/dur/1 -> Jain = (2/3 + 1)^2 / (2 ((2/3)^2 + 1))
    x = (2 / 3, 1.0)
    assert res["fairness"]["jain_index"] == pytest.approx(sum(x) ** 2 / (2 * sum(v * v for v in x)))
    assert res["unclassed"] == 0


def test_run_slo_judges_a_class_without_its_own() -> None:
    res = per_class(two_classes(), None, TABLE, slo=Slo({"e2el": 500.0}))
    assert res is not None
    assert res["per_class"]["batch"]["slo_ms"] == {"e2el": 500.0} and res["per_class"]["batch"]["good"] == 0
    assert res["per_class"]["chat"]["slo_ms"] == {"ttft": 100.0}  # its own wins


def test_no_classes_no_block_and_unknown_tenants_get_weight_one() -> None:
    plain = [rec(T0, [10, 20], 2)]
    assert per_class(plain, None, []) is None
    tenants = [rec(T0, [10, 20], 2, request_class="t1"), rec(T0 + 1, [10, 20], 2, request_class="t2")]
    res = per_class(tenants, None, [])
    assert res is not None and set(res["per_class"]) == {"t1", "t2"}
    assert res["per_class"]["t1"]["weight"] is None and res["per_class"]["t1"]["weight_share"] == 0.5
    assert res["fairness"]["jain_index"] == pytest.approx(1.0)


def test_a_class_with_no_request_has_no_latency_and_zero_goodput() -> None:
    res = per_class(two_classes(), None, [*TABLE, {"name": "idle", "weight": 1.0, "ttft": 10.0}])
    assert res is not None
    idle = res["per_class"]["idle"]
    assert idle["requests"] == 0 and idle["request_goodput"] == 0 and idle["good_fraction"] is None
    assert not any(k.endswith("_ms") and k != "slo_ms" for k in idle)  # absent, never 0


def test_valid_in_goodput() -> None:
    recs = [rec(T0, [10, 20], 2, valid=True), rec(T0 + 1, [10, 20], 2, valid=False), rec(T0 + 2, [10, 20], 2)]
    meta = {"goodput": "ttft:500 valid"}
    latency_only = build_run_result(recs, {}, slo=Slo.parse(["ttft:500"])).metrics["goodput"]
    assert latency_only["good"] == 3 and "requires_valid" not in latency_only
    both = build_run_result(recs, meta, slo=Slo.parse([meta["goodput"]])).metrics["goodput"]
    assert both["good"] == 2 and both["good_latency_only"] == 3 and both["invalid"] == 1
    assert both["requires_valid"] is True
    assert Slo.parse(["ttft:500 valid"]).met_by(recs[1]) is False and Slo.parse(["ttft:500"]).met_by(recs[1])


def test_classes_in_result_json_round_trip() -> None:
    meta = {"classes": TABLE}
    res = build_run_result(two_classes(), meta)
    doc = res.to_json()
    assert list(doc["classes"]["per_class"]) == ["chat", "batch"]
    assert list(doc).index("classes") == list(doc).index("per_scenario") + 1
    assert RunResult.from_json(doc).to_json() == doc
    assert "classes" not in build_run_result([rec(T0, [10, 20], 2)], {}).to_json()


def test_class_misses_names_the_class_over_its_limit() -> None:
    from vllm_users.measure.per_class import class_misses

    res = per_class(two_classes(), None, [*TABLE, {"name": "idle", "weight": 1.0, "ttft": 10.0}])
    assert class_misses(res, "p99") == [
        ("chat", "p99 TTFT 295.6 ms > 100 ms")
    ]  # idle sent nothing: no verdict
    assert class_misses(res, "p50") == []  # median 80 ms is within 100
    failing = per_class([rec(T0, [], None, request_class="chat", error="http", status=500)], None, TABLE)
    assert class_misses(failing) == [("chat", "no ttft samples (1 failed)")]
    assert class_misses(None) == []


def test_summary_and_diagnosis_name_the_class() -> None:
    from orchestration.report.diagnose import _class_slo
    from orchestration.report.postprocess import RunData
    from orchestration.report.summary import format_summary
    from orchestration.report.summary_groups import class_lines

    doc = build_run_result(two_classes(), {"classes": TABLE}).to_json()
    text = format_summary(doc)
    assert "Per class" in text and "Fairness (Jain, goodput/weight):" in text
    row = next(line for line in class_lines(doc["classes"]) if line.startswith("chat"))
    assert row.split()[:6] == [
        "chat",
        "75%",
        "38%",
        "3",
        "0",
        f"{doc['classes']['per_class']['chat']['output_throughput']:.1f}",
    ]
    assert row.rstrip().endswith("67%  ttft:100")
    assert class_lines(None) == []
    found = _class_slo(RunData("d", "run1", doc, "records"))
    assert [f.title for f in found] == ["Class chat misses its SLO"]
    # batch got 62 % of the output tokens for a weight of 25 %: it took chat's capacity
    assert "class batch took 62% of the output tokens for a weight of 25%" in found[0].evidence


def test_a_pooling_class_prints_without_output_figures() -> None:
    """An embeddings class: no output tokens, TTFT or TPOT (absent in the block, n/a in the summary),
    its E2EL and goodput printed; the summary used to raise on its output_throughput of None."""
    from orchestration.report.summary_groups import class_lines

    recs = two_classes()
    for i in range(2):
        r = rec(T0 + i, [12.0], None, request_class="emb")
        r.endpoint, r.not_streamed = "embeddings", True  # as record_from_stream makes a pooling answer
        recs.append(r)
    doc = build_run_result(recs, {"classes": [*TABLE, {"name": "emb", "weight": 1.0}]}).to_json()
    emb = doc["classes"]["per_class"]["emb"]
    assert emb["output_throughput"] is None and not any("ttft" in k or "tpot" in k for k in emb)
    row = next(line for line in class_lines(doc["classes"]) if line.startswith("emb"))
    assert row.split()[3:8] == ["2", "0", "n/a", "n/a/n/a", "n/a"]
