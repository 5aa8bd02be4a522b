"""Generate a JSON instance valid against a (practical subset of) JSON Schema, from a seeded RNG."""

from __future__ import annotations

import random
from typing import Any

from .tokenizer import VOCAB

_MAX_DEPTH = 8


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    """Follow local ``$ref``s (``#/$defs/x``, ``#/definitions/x``); anything else is taken as-is."""
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < 16:
        ref = schema["$ref"]
        node: Any = root
        if ref.startswith("#"):
            for part in ref.lstrip("#").strip("/").split("/"):
                if part and isinstance(node, dict):
                    node = node.get(part.replace("~1", "/").replace("~0", "~"), {})
        schema = node
        seen += 1
    return schema if isinstance(schema, dict) else {}


def _string(schema: dict[str, Any], rng: random.Random) -> str:
    """A string that honours minLength/maxLength (patterns and formats are not supported)."""
    lo = int(schema.get("minLength", 0))
    hi = int(schema.get("maxLength", max(lo, 24)))
    hi = max(hi, lo)
    fmt = schema.get("format")
    if fmt == "date" and lo <= 10 <= hi:
        return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    target = rng.randint(lo, min(hi, max(lo, 24)))
    words: list[str] = []
    length = 0
    while length < target:
        w = rng.choice(VOCAB)
        words.append(w)
        length += len(w) + (1 if len(words) > 1 else 0)
    text = " ".join(words)[:target]
    # a trailing space would be valid but looks odd; pad with a letter instead
    if text.endswith(" "):
        text = text[:-1] + "a"
    return text


def _number(schema: dict[str, Any], rng: random.Random, integer: bool) -> int | float:
    """A number inside minimum/maximum (and the exclusive bounds, and multipleOf for integers)."""
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    xlo = schema.get("exclusiveMinimum")
    xhi = schema.get("exclusiveMaximum")
    if isinstance(xlo, bool):  # draft-4 style boolean flags
        xlo = lo if xlo else None
    if isinstance(xhi, bool):
        xhi = hi if xhi else None
    low = float(lo) if isinstance(lo, (int, float)) else None
    high = float(hi) if isinstance(hi, (int, float)) else None
    if isinstance(xlo, (int, float)):
        low = max(low, float(xlo)) if low is not None else float(xlo)
    if isinstance(xhi, (int, float)):
        high = min(high, float(xhi)) if high is not None else float(xhi)
    if low is None and high is None:
        low, high = 0.0, 100.0
    elif low is None:
        low = high - 100.0  # type: ignore[operator]
    elif high is None:
        high = low + 100.0
    assert low is not None and high is not None
    if integer:
        ilo = int(low) + 1 if isinstance(xlo, (int, float)) and int(low) == low else int(-(-low // 1))
        ihi = int(high) - 1 if isinstance(xhi, (int, float)) and int(high) == high else int(high // 1)
        if ihi < ilo:
            ihi = ilo
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            first = -(-ilo // step) * step
            count = max(0, (ihi - first) // step)
            return first + step * rng.randint(0, count)
        return rng.randint(ilo, ihi)
    if isinstance(xlo, (int, float)) or isinstance(xhi, (int, float)):
        # keep clear of exclusive bounds
        span = high - low
        return round(low + span * (0.1 + 0.8 * rng.random()), 6)
    return round(rng.uniform(low, high), 4)


def generate(schema: Any, rng: random.Random, root: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """Return an instance of ``schema``; deterministic for a given RNG state."""
    if root is None:
        root = schema if isinstance(schema, dict) else {}
    if schema is True or schema is None:
        return rng.choice(VOCAB)
    s = _resolve(schema, root)
    if "const" in s:
        return s["const"]
    if isinstance(s.get("enum"), list) and s["enum"]:
        return rng.choice(s["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(s.get(key), list) and s[key]:
            return generate(rng.choice(s[key]), rng, root, depth + 1)
    if isinstance(s.get("allOf"), list) and s["allOf"]:
        merged: dict[str, Any] = {}
        for sub in s["allOf"]:
            sub = _resolve(sub, root)
            for k, v in sub.items():
                if k in ("properties",) and k in merged:
                    merged[k] = {**merged[k], **v}
                elif k == "required" and k in merged:
                    merged[k] = list(merged[k]) + list(v)
                else:
                    merged[k] = v
        return generate(merged, rng, root, depth + 1)
    typ = s.get("type")
    if isinstance(typ, list):
        choices = [t for t in typ if t != "null"] or typ
        typ = rng.choice(choices) if choices else None
    if typ is None:
        typ = "object" if "properties" in s else "array" if "items" in s else "string"
    if typ == "object":
        return _object(s, rng, root, depth)
    if typ == "array":
        items = s.get("items", {})
        lo = int(s.get("minItems", 0))
        hi = int(s.get("maxItems", max(lo, 3)))
        n = lo if depth >= _MAX_DEPTH else rng.randint(lo, max(lo, min(hi, lo + 3)))
        prefix = s.get("prefixItems")
        out = []
        for i in range(n):
            sub = prefix[i] if isinstance(prefix, list) and i < len(prefix) else items
            out.append(generate(sub, rng, root, depth + 1))
        return out
    if typ == "string":
        return _string(s, rng)
    if typ == "integer":
        return _number(s, rng, integer=True)
    if typ == "number":
        return _number(s, rng, integer=False)
    if typ == "boolean":
        return rng.random() < 0.5
    if typ == "null":
        return None
    return rng.choice(VOCAB)


def _object(s: dict[str, Any], rng: random.Random, root: dict[str, Any], depth: int) -> dict[str, Any]:
    """An object with every required property and, below the depth cap, some optional ones."""
    props = s.get("properties") or {}
    required = [r for r in s.get("required", []) if isinstance(r, str)]
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if name in required or (depth < _MAX_DEPTH // 2 and rng.random() < 0.7):
            out[name] = generate(sub, rng, root, depth + 1)
    for name in required:
        if name not in out:
            out[name] = generate(s.get("additionalProperties") or {"type": "string"}, rng, root, depth + 1)
    if not props and not required and s.get("additionalProperties") is not False and depth == 0:
        # a free-form object (json_object mode): give it a little content
        out = {"answer": rng.choice(VOCAB), "score": rng.randint(0, 100)}
    lo = int(s.get("minProperties", 0))
    i = 0
    while len(out) < lo and i < 64:
        out.setdefault(f"extra_{i}", rng.choice(VOCAB))
        i += 1
    return out
