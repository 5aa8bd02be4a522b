"""Generated schemas are valid, bounded and seeded; the validity checks fail what they should."""

from __future__ import annotations

import json
import random

import pytest
from jsonschema import Draft202012Validator

from vllm_sim.schema_gen import generate
from vllm_users.workload.schemas import (
    COMPLEXITIES,
    SchemaError,
    check_schema,
    generate_schema,
    judge_json,
    load_schema_file,
    schema_pool,
    worst_case_chars,
)


@pytest.mark.parametrize("complexity", COMPLEXITIES)
def test_generated_schemas_are_valid_json_schema(complexity: str) -> None:
    for seed in range(40):
        s = generate_schema(seed, complexity)
        Draft202012Validator.check_schema(s)
        assert s["type"] == "object" and s["additionalProperties"] is False


def test_same_seed_same_schema_other_seed_differs() -> None:
    assert generate_schema(3, "mixed") == generate_schema(3, "mixed")
    assert generate_schema(3, "mixed") != generate_schema(4, "mixed")
    assert schema_pool(1, "flat", 4) == schema_pool(1, "flat", 4)


def _walk(s: dict) -> list[dict]:
    out = [s]
    for v in (s.get("properties") or {}).values():
        out += _walk(v)
    if isinstance(s.get("items"), dict):
        out += _walk(s["items"])
    return out


@pytest.mark.parametrize("complexity", COMPLEXITIES)
def test_schemas_are_bounded(complexity: str) -> None:
    kinds: set[str] = set()
    for seed in range(30):
        for node in _walk(generate_schema(seed, complexity)):
            t = node.get("type")
            if "enum" in node:
                kinds.add("enum")
            elif t == "string":
                assert "maxLength" in node
            elif t in ("integer", "number"):
                assert "minimum" in node and "maximum" in node
            elif t == "array":
                assert "maxItems" in node
                kinds.add("array")
            elif t == "object" and node is not None:
                kinds.add("object")
    if complexity == "enums":
        assert "enum" in kinds
    if complexity == "arrays":
        assert "array" in kinds


@pytest.mark.parametrize("complexity", COMPLEXITIES)
def test_instances_validate_and_fit_worst_case(complexity: str) -> None:
    rng = random.Random(0)
    for seed in range(20):
        s = generate_schema(seed, complexity)
        inst = generate(s, rng)
        text = json.dumps(inst, separators=(",", ":"))
        assert judge_json(text, s, "stop").valid
        assert len(text) <= worst_case_chars(s)


def test_judge_json_rejects_truncated_wrong_type_extra_field() -> None:
    s = {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 5}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert judge_json('{"a": 3}', s).valid
    v = judge_json('{"a": 3', s, "length")
    assert not v.valid and "truncated at max_tokens" in v.detail
    v = judge_json('{"a": "x"}', s)
    assert not v.valid and "$.a" in v.detail
    assert not judge_json('{"a": 9}', s).valid
    assert not judge_json('{"a": 1, "b": 2}', s).valid
    assert not judge_json('{"a": 1} trailing', s).valid
    assert not judge_json("   ", s).valid
    assert not judge_json("{}", s).valid


def test_check_schema_rejects_invalid_schema(tmp_path) -> None:
    with pytest.raises(SchemaError, match="not valid JSON Schema"):
        check_schema({"type": "no-such-type"})
    with pytest.raises(SchemaError, match="expected an object"):
        check_schema([1, 2])
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object", "properties": {"a": {"minimum": "zero"}}}')
    with pytest.raises(SchemaError) as e:
        load_schema_file(str(bad))
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    notjson = tmp_path / "x.json"
    notjson.write_text("{nope")
    with pytest.raises(SchemaError, match="is not JSON"):
        load_schema_file(str(notjson))
    with pytest.raises(SchemaError, match="cannot read"):
        load_schema_file(str(tmp_path / "missing.json"))


def test_unknown_complexity() -> None:
    with pytest.raises(SchemaError, match="unknown schema complexity"):
        generate_schema(0, "deep")
