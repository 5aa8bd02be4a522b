"""The typed result: result.json's keys in their order, a lossless round trip, one loader, cost in the build."""

from __future__ import annotations

import json
import os

from tests.unit.measure.helpers import rec
from vllm_users.measure.result_builder import build_run_result, write_result
from vllm_users.measure.run_result import RunResult, load_result, save_result

META = {
    "date": "20261201-070000",
    "model_id": "m",
    "endpoint": "chat",
    "request_rate": 4.0,
    "burstiness": 1.0,
    "num_prompts": 6,
    "input_len": 100,
    "ramp_up_strategy": None,
}


def _result() -> RunResult:
    recs = [
        rec(float(i), [10, 20, 30], out=3, prompt=100, input_len=100, turn=i % 2, session=1) for i in range(6)
    ]
    return build_run_result(recs, META)


def test_to_json_keys_in_vllm_order_then_ours() -> None:
    res = _result().replace(
        client_health={"client_bound": False},
        data_loss={"complete": True},
        client_bound=False,
        timeline=[],
        exit_code=0,
        server_served=8,
        missing_vs_server=0,
        cost={"gpus": 1},
    )
    keys = list(res.to_json())
    assert keys[:8] == [
        "date",
        "backend",
        "model_id",
        "tokenizer_id",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
    ]
    assert keys[8:12] == [
        "duration",
        "completed",
        "failed",
        "total_input_tokens",
    ]  # vLLM bench serve's fields
    tail = keys[keys.index("input_len_check") :]
    assert tail == [
        "input_len_check",
        "per_scenario",
        "ttft_by_turn",
        "tool",
        "meta",
        "client_health",
        "data_loss",
        "client_bound",
        "timeline",
        "exit_code",
        "server_served",
        "missing_vs_server",
        "cost",
    ]
    doc = res.to_json()
    assert doc["request_rate"] == 4.0 and doc["completed"] == 6 and doc["tokenizer_id"] == "m"
    assert "ramp_up_strategy" not in doc and "ramp_up_strategy" in doc["meta"]  # not a ramp: meta keeps it
    assert "profile" not in doc and "warnings" not in doc  # unset blocks are left out, as before


def test_round_trip_keeps_every_key_and_its_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = _result().replace(warnings=("w1",), exit_code=3, profile={"profiled": False})
    save_result(str(tmp_path), res)
    text = (tmp_path / "result.json").read_text()
    back = load_result(str(tmp_path))
    assert back == res and back is not None
    assert json.dumps(back.to_json(), indent=2) == text
    assert back.completed == 6 and back.recorded == 6 and back.exit_code == 3 and back.warnings == ("w1",)
    assert load_result(str(tmp_path / "nowhere")) is None
    (tmp_path / "result.json").write_text('{"completed": 2')  # torn: a killed writer
    assert load_result(str(tmp_path)) is None


def test_reader_warnings_follow_the_results_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path)
    with open(os.path.join(d, "records.jsonl"), "w") as fh:
        for i in range(3):
            fh.write(rec(float(i), [10, 20], out=2, prompt=50).to_json() + "\n")
        fh.write('{"scenario": "ch')  # the kill cut the last line
    doc = write_result(d, {"model_id": "m"}, {"exit_code": 0})
    assert doc["warnings"] == ["1 torn or unparseable record line(s) skipped"]
    assert list(doc).index("warnings") < list(doc).index("per_scenario") and doc["exit_code"] == 0
    assert json.load(open(os.path.join(d, "result.json"))) == doc
