"""Per-model results: a model mix's (or the classes' adapters') figures per served name, computed as the classes'
are (one grouping function), and no block at all for a run that sent to one model."""

from __future__ import annotations

from typing import Any

import pytest

from orchestration.report.summary import format_summary, model_lines
from tests.unit.measure.helpers import rec
from vllm_users.measure.metrics import Slo
from vllm_users.measure.per_model import UNNAMED_BASE, per_model
from vllm_users.measure.result_builder import build_run_result
from vllm_users.measure.run_result import RunResult

T0 = 1_700_000_000.0
MIX = {"model_id": "base:2,lora-a:1,lora-b:1"}


def mixed() -> list[Any]:
    """base (the record's model None: the run's own): 3 requests, TTFT 20 ms, 11 tokens 100 ms apart in all -> TPOT
    10 ms; lora-b: 2 requests, TTFT 50 ms, 11 tokens over 400 ms -> TPOT 40 ms; lora-a: 1 request, failed."""
    out = [rec(T0 + i, [20, 120], 11) for i in range(3)]
    out += [rec(T0 + 3 + i, [50, 450], 11, model="lora-b") for i in range(2)]
    out.append(rec(T0 + 5, [], None, model="lora-a", error="http", status=500))
    return out


def test_each_model_gets_its_own_counts_shares_and_latency() -> None:
    res = per_model(mixed(), None, MIX)
    assert res is not None and list(res) == ["base", "lora-a", "lora-b"]  # the mix's order
    base, a, b = res["base"], res["lora-a"], res["lora-b"]
    assert (base["requests"], base["completed"], base["failed"]) == (3, 3, 0)
    assert (b["requests"], b["completed"], b["failed"]) == (2, 2, 0)
    assert (a["requests"], a["completed"], a["failed"]) == (1, 0, 1)
    assert (base["weight"], base["weight_share"], b["weight_share"]) == (2.0, 0.5, 0.25)
    assert base["request_share"] == pytest.approx(3 / 5) and b["request_share"] == pytest.approx(2 / 5)
    assert base["median_tpot_ms"] == pytest.approx(10.0) and b["median_tpot_ms"] == pytest.approx(40.0)
    assert b["p99_itl_ms"] == pytest.approx(400.0) and base["p50_itl_ms"] == pytest.approx(100.0)
    assert b["p90_ttft_ms"] == pytest.approx(50.0) and b["p99_e2el_ms"] == pytest.approx(450.0)
    dur = 5.005  # first start to the failed request's end (5 ms after its start at T0 + 5)
    assert b["output_throughput"] == pytest.approx(22 / dur) and base["request_throughput"] == pytest.approx(
        3 / dur
    )
    # a model with no success has no latency figure at all (absent, never 0), and no SLO: no goodput field
    assert not any(k.endswith("_ms") for k in a)
    assert not any(k in m for m in res.values() for k in ("good", "request_goodput", "slo_ms"))


def test_the_runs_slo_judges_every_model() -> None:
    res = per_model(mixed(), None, MIX, slo=Slo({"tpot": 20.0}))
    assert res is not None
    assert res["base"]["good"] == 3 and res["base"]["good_fraction"] == 1.0
    assert (
        res["lora-b"]["good"] == 0 and res["lora-b"]["request_goodput"] == 0.0
    )  # the slow adapter misses it
    assert res["lora-a"]["good_fraction"] is None  # nothing completed: no fraction
    assert res["lora-b"]["slo_ms"] == {"tpot": 20.0}


@pytest.mark.parametrize("model_id", ["base", "base:1", "", None])
def test_one_model_has_no_block(model_id: str | None) -> None:
    recs = [rec(T0 + i, [20, 120], 11) for i in range(3)]
    assert per_model(recs, None, {"model_id": model_id}) is None
    doc = build_run_result(recs, {"model_id": model_id}).to_json()
    assert "per_model" not in doc
    assert "Per model" not in format_summary(doc)


def test_a_named_model_that_got_nothing_is_listed_without_figures() -> None:
    recs = [rec(T0 + i, [20, 120], 11) for i in range(3)]  # every request drew the base
    res = per_model(recs, None, MIX)
    assert res is not None and res["lora-a"]["requests"] == 0 and res["lora-a"]["request_share"] == 0.0
    assert not any(k.endswith("_ms") for k in res["lora-a"])


def test_classes_models_and_an_unnamed_base() -> None:
    recs = [rec(T0, [20, 120], 11, model="lora-x", request_class="x"), rec(T0 + 1, [20, 120], 11)]
    meta = {"classes": [{"name": "x", "weight": 1.0, "model": "lora-x"}]}  # no --model: the base has no name
    res = per_model(recs, None, meta)
    assert res is not None and list(res) == ["lora-x", UNNAMED_BASE]
    assert "weight" not in res["lora-x"] and res[UNNAMED_BASE]["completed"] == 1
    mixed_classes = per_model(recs, None, {**meta, "model_id": "base:1,lora-x:1"})
    assert mixed_classes is not None and list(mixed_classes) == ["base", "lora-x"]
    # a class's model= takes its requests out of the mix's draw: no share to compare with
    assert mixed_classes["base"]["weight"] == 1.0 and "weight_share" not in mixed_classes["base"]


def test_per_model_in_result_json_round_trip_and_summary() -> None:
    doc = build_run_result(mixed(), {**MIX, "goodput": "tpot:20"}, slo=Slo({"tpot": 20.0})).to_json()
    assert list(doc["per_model"]) == ["base", "lora-a", "lora-b"]
    assert list(doc).index("per_model") == list(doc).index("per_scenario") + 1
    assert RunResult.from_json(doc).to_json() == doc
    assert "per_model" not in RunResult.from_json(doc).metrics
    text = format_summary(doc)
    assert "Per model" in text
    row = next(line for line in model_lines(doc["per_model"]) if line.startswith("lora-b"))
    # model, asked, got, ok, fail, tok/s, TTFT p50/p99, TPOT p50/p99, ITL p99, E2EL p99, goodput, good
    assert row.split() == [
        "lora-b", "25%", "40%", "2", "0", f"{22 / 5.005:.1f}", "50.0/50.0", "40.0/40.0", "400.0", "450.0", "0.00", "0%"
    ]  # fmt: skip
    failed = next(line for line in model_lines(doc["per_model"]) if line.startswith("lora-a"))
    assert failed.split()[5:10] == ["0.0", "n/a/n/a", "n/a/n/a", "n/a", "n/a"]


def test_a_class_and_a_model_of_the_same_requests_get_the_same_figures() -> None:
    """One grouping function: class x sends to lora-x and only there, so its figures are lora-x's (ITL included);
    the rows without a class are counted as unclassed."""
    from vllm_users.measure.per_class import per_class

    recs = mixed()
    for r in recs:
        r.request_class = "x" if r.model == "lora-b" else None
    table = [{"name": "x", "weight": 1.0}]
    cls = per_class(recs, None, table)
    res = per_model(recs, None, MIX)
    assert cls is not None and res is not None
    x, b = cls["per_class"]["x"], res["lora-b"]
    shared = set(x) & set(b) - {"weight", "weight_share"}
    assert {"p99_itl_ms", "median_tpot_ms", "request_share", "output_throughput"} <= shared
    assert {k: x[k] for k in shared} == {k: b[k] for k in shared}
    assert cls["unclassed"] == 4
