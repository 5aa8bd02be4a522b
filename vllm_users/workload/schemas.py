"""JSON Schemas for the json and tools scenarios: generated from a seed, bounded, and checked with jsonschema.

Generated schemas are bounded (enums, maxLength, numeric ranges, maxItems, no free-form objects) so that a
valid answer has a known worst-case size and a model under structured outputs can finish it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as _JsSchemaError
from jsonschema.exceptions import best_match

from vllm_users.errors import SchemaError  # raised here; importable from here too

COMPLEXITIES = ("flat", "nested", "arrays", "enums", "mixed")

_NAMES = [
    "name",
    "title",
    "city",
    "country",
    "status",
    "priority",
    "owner",
    "label",
    "category",
    "color",
    "count",
    "score",
    "price",
    "weight",
    "rating",
    "level",
    "active",
    "verified",
    "quantity",
    "code",
    "region",
    "mode",
    "kind",
    "tier",
    "size",
    "team",
    "topic",
    "unit",
    "stage",
    "source",
]
_ENUM_WORDS = [
    "low",
    "medium",
    "high",
    "red",
    "green",
    "blue",
    "open",
    "closed",
    "pending",
    "north",
    "south",
    "east",
    "west",
    "small",
    "large",
    "alpha",
    "beta",
    "gamma",
    "draft",
    "final",
]


@dataclass(slots=True)
class Verdict:
    """Outcome of validating one answer: valid or not, and a one-line reason."""

    valid: bool
    detail: str = ""


def _primitive(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(("string", "integer", "number", "boolean"))
    if kind == "string":
        return {"type": "string", "minLength": 1, "maxLength": rng.choice((8, 16, 24, 32))}
    if kind == "integer":
        lo = rng.randint(0, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.choice((10, 100, 1000))}
    if kind == "number":
        return {"type": "number", "minimum": 0, "maximum": rng.choice((1, 10, 100))}
    return {"type": "boolean"}


def _enum(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.25:
        return {"type": "integer", "enum": sorted(rng.sample(range(1, 10), 3))}
    return {"type": "string", "enum": rng.sample(_ENUM_WORDS, rng.randint(2, 5))}


def _array(rng: random.Random, depth: int) -> dict[str, Any]:
    items = _object(rng, "flat", depth + 1, 2, 3) if depth < 2 and rng.random() < 0.4 else _primitive(rng)
    return {"type": "array", "items": items, "minItems": 1, "maxItems": rng.randint(2, 4)}


def _field(rng: random.Random, complexity: str, depth: int) -> dict[str, Any]:
    if complexity == "mixed":
        complexity = rng.choice(("flat", "nested", "arrays", "enums"))
    if complexity == "nested" and depth < 2 and rng.random() < 0.5:
        return _object(rng, "flat" if depth >= 1 else "nested", depth + 1, 2, 4)
    if complexity == "arrays" and rng.random() < 0.5:
        return _array(rng, depth)
    if complexity == "enums" and rng.random() < 0.6:
        return _enum(rng)
    return _primitive(rng)


def _object(rng: random.Random, complexity: str, depth: int, lo: int, hi: int) -> dict[str, Any]:
    names = rng.sample(_NAMES, rng.randint(lo, hi))
    props = {n: _field(rng, complexity, depth) for n in names}
    return {"type": "object", "properties": props, "required": names, "additionalProperties": False}


def generate_schema(seed: int, complexity: str = "mixed") -> dict[str, Any]:
    """A bounded JSON Schema derived from `seed` at one of COMPLEXITIES (same seed, same schema)."""
    if complexity not in COMPLEXITIES:
        raise SchemaError(f"unknown schema complexity {complexity!r} (available: {', '.join(COMPLEXITIES)})")
    rng = random.Random(f"schema:{complexity}:{seed}")
    schema = _object(rng, complexity, 0, 3, 6)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"record_{complexity}_{seed}"
    return schema


def schema_pool(seed: int, complexity: str, size: int = 16) -> list[dict[str, Any]]:
    """`size` schemas for a run: request i uses pool[i % size]."""
    return [generate_schema(seed * 1009 + i, complexity) for i in range(size)]


def worst_case_chars(schema: dict[str, Any]) -> int:
    """An upper bound on the compact JSON size of a valid instance of a generated (bounded) schema."""
    t = schema.get("type")
    if "enum" in schema:
        return max(len(json.dumps(v)) for v in schema["enum"])
    if t == "object":
        props = schema.get("properties", {})
        return 2 + sum(len(json.dumps(k)) + 4 + worst_case_chars(v) for k, v in props.items())
    if t == "array":
        return 2 + int(schema.get("maxItems", 8)) * (worst_case_chars(schema.get("items", {})) + 2)
    if t == "string":
        return 2 + 2 * int(schema.get("maxLength", 64))
    if t in ("integer", "number"):
        return 24
    if t == "boolean":
        return 5
    return 64


def check_schema(schema: Any, origin: str = "schema") -> dict[str, Any]:
    """Raise SchemaError (one line, naming `origin`) unless `schema` is a valid JSON Schema object."""
    if not isinstance(schema, dict):
        raise SchemaError(
            f"{origin} is not valid JSON Schema: expected an object, got {type(schema).__name__}"
        )
    cls = _validator_class(schema)
    try:
        cls.check_schema(schema)
    except _JsSchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        msg = e.message.splitlines()[0][:160]
        raise SchemaError(f"{origin} is not valid JSON Schema: {msg} at {where}") from None
    return schema


def _validator_class(schema: dict[str, Any]) -> Any:
    from jsonschema.validators import validator_for

    return validator_for(schema, default=Draft202012Validator)


def load_schema_file(path: str) -> dict[str, Any]:
    """Read and check a user-given schema file; SchemaError naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as e:
        raise SchemaError(f"cannot read schema file {path}: {e.strerror}") from None
    except ValueError as e:
        raise SchemaError(f"schema file {path} is not JSON: {e}") from None
    return check_schema(doc, f"schema file {path}")


def validate_instance(instance: Any, schema: dict[str, Any]) -> Verdict:
    """Check a decoded value against `schema`: the most relevant error as a one-line detail."""
    err = best_match(_validator_class(schema)(schema).iter_errors(instance))
    if err is None:
        return Verdict(True)
    where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return Verdict(False, f"schema mismatch at {where}: {err.message[:160]}")


def judge_json(text: str, schema: dict[str, Any], finish_reason: str | None = None) -> Verdict:
    """Verdict on a generated answer: parses as one JSON value and matches `schema`."""
    stripped = text.strip()
    if not stripped:
        return Verdict(False, f"empty answer (finish_reason={finish_reason})")
    try:
        value = json.loads(stripped)
    except ValueError as e:
        cut = " truncated at max_tokens;" if finish_reason == "length" else ""
        return Verdict(
            False, f"not JSON ({len(stripped)} chars, finish_reason={finish_reason}):{cut} {e}"[:200]
        )
    return validate_instance(value, schema)
