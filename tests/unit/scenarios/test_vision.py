"""The vision scenario: registered for chat only, the text's exact token count only when it is
exact, the record's image fields, and the result's image rows (absent when no image was sent)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from orchestration.report.summary import format_summary
from vllm_users.measure.record import RequestRecord, add_images
from vllm_users.measure.result_builder import build_result
from vllm_users.options import build
from vllm_users.scenarios.registry import SCENARIOS, for_endpoint, parse_mix
from vllm_users.scenarios.vision import VisionUser
from vllm_users.workload.prompts import LengthModel, Prompt


def test_registered_and_chat_only() -> None:
    assert SCENARIOS["vision"] == "vllm_users.scenarios.vision:VisionUser"
    assert for_endpoint(parse_mix("vision"), "chat") == [("vision", 1)]
    with pytest.raises(ValueError, match="--endpoint chat"):
        for_endpoint(parse_mix("vision"), "completions")
    assert VisionUser.min_images == 1 and VisionUser.scenario == "vision"


def _user(exact: bool, overhead: int | None, **opts: object) -> SimpleNamespace:
    lm = LengthModel(1.0, {"a": 1} if exact else {}, {"a": 1} if exact else {}, "tokenize:vllm")
    lm.overhead = overhead
    o = {"dataset": "", "prefix_len": 0, "tokenizer": "", **opts}
    return SimpleNamespace(options=build(**o), length_model=lambda: lm)


@pytest.mark.parametrize(
    ("exact", "overhead", "opts", "want"),
    [
        (True, 7, {}, 31),
        (False, 7, {}, None),
        (False, 7, {"tokenizer": "/tok"}, 31),
        (True, None, {}, None),
        (True, 7, {"dataset": "d.json"}, None),
        (True, 7, {"prefix_len": 10}, None),
    ],
)
def test_text_tokens_only_when_exact(exact: bool, overhead: int | None, opts: dict, want: int | None) -> None:
    p = Prompt([{"role": "user", "content": "x"}], None, 24, 8)
    assert VisionUser.text_tokens(_user(exact, overhead, **opts), p) == want  # type: ignore[arg-type]


def _rec(seq: int, prompt: int | None) -> RequestRecord:
    return RequestRecord(
        scenario="vision",
        worker="w",
        user=1,
        seq=seq,
        endpoint="chat",
        t_start=1000.0 + seq,
        chunk_times_us=[1000, 2000],
        end_us=2500,
        prompt_tokens=prompt,
        output_tokens=2,
    )


def test_add_images_fields() -> None:
    assert add_images(_rec(0, 100), 2, 30).image_tokens == 70
    r = add_images(_rec(0, 100), 2, None)
    assert (r.images, r.image_tokens) == (2, None)  # no exact text count: no estimate
    assert add_images(_rec(0, 20), 1, 30).image_tokens is None  # the server counts less: no negative count
    assert add_images(_rec(0, None), 1, 30).image_tokens is None
    r = add_images(_rec(0, 100), 0, 30)
    assert (r.images, r.image_tokens) == (None, None)
    back = RequestRecord.from_dict(json.loads(add_images(_rec(0, 100), 2, 30).to_json()))
    assert (back.images, back.image_tokens) == (2, 70)


def test_result_rows_only_when_images_were_sent() -> None:
    recs = [add_images(_rec(i, 100 + i), 2, 30) for i in range(3)] + [add_images(_rec(3, 50), 1, None)]
    res = build_result(recs, {})
    assert res["total_images"] == 7 and res["image_requests"] == 4
    assert res["mean_images_per_request"] == pytest.approx(7 / 4)
    assert res["mean_image_tokens_per_request"] == pytest.approx(71.0)  # (70 + 71 + 72) / 3: the known ones
    assert res["image_tokens_estimated_requests"] == 3
    text = format_summary(res)
    assert "Images per request:" in text and "Image tokens per request (est.):" in text and "71.0" in text
    plain = build_result([_rec(i, 100) for i in range(3)], {})
    assert not any("image" in k for k in plain)
    assert "Image" not in format_summary(plain)
