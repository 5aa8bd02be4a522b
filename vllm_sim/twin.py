"""Read a twin profile (``twin.json``, written by ``vllm-locust calibrate``) into simulator settings.

The profile is the simulator's constants fitted to one real server. This module is its one reader and the owner of
its schema version; ``orchestration/twin/profile.py`` writes it (and imports the names below), so the simulator
stays free of orchestration imports.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "CONSTANTS",
    "KIND",
    "OPTIONAL",
    "VERSION",
    "TwinError",
    "load_twin",
    "read_twin",
    "twin_overrides",
    "validate_twin",
]

KIND = "vllm-locust-twin"
VERSION = 1
# constant name -> (SimConfig field, type): every one must be in a profile (a probe that could not measure one
# writes the simulator's default with source "default", so a profile is always complete)
CONSTANTS: dict[str, type] = {
    "prefill_tokens_per_s": float,
    "request_overhead_ms": float,
    "decode_step_ms": float,
    "decode_per_seq_ms": float,
    "max_num_seqs": int,
    "kv_cache_tokens": int,
    "block_size": int,
    "max_model_len": int,
    "enable_prefix_caching": bool,
}
# constants added after version 1 shipped, with the value that means "not in the model": a profile without one was
# fitted by a model without it, so it reads as that model (no version bump, no new error for older files)
OPTIONAL: dict[str, tuple[type, float]] = {
    "decode_per_ctx_token_us": (float, 0.0),
    "prefill_per_ctx_token_ns": (float, 0.0),
    "max_num_batched_tokens": (
        int,
        8192,
    ),  # SimConfig's default, which every profile before it was fitted with
    # the API-server stage (apiserver.py): 0 processes, the model without it, whatever the costs say
    "api_server_count": (int, 0),
    "api_request_cost_us": (float, 0.0),
    "api_prompt_token_cost_us": (float, 0.0),
    "api_chunk_cost_us": (float, 0.0),
}


class TwinError(ValueError):
    """A twin profile that cannot be used: unreadable, of another version, or missing a field."""


def read_twin(path: str) -> dict[str, Any]:
    """The profile at ``path``, validated (TwinError with a one-line reason otherwise)."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as e:
        raise TwinError(f"twin file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise TwinError(f"twin file {path}: not JSON ({e})") from None
    validate_twin(doc, path)
    return doc  # type: ignore[no-any-return]


def validate_twin(doc: Any, where: str = "twin") -> None:
    """Raise TwinError naming the first problem of a profile: its kind, version, or a missing/mistyped constant."""
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise TwinError(f'{where}: not a twin profile (expected "kind": "{KIND}")')
    version = doc.get("version")
    if version != VERSION:
        raise TwinError(
            f"{where}: twin profile version {version!r}; this build reads version {VERSION} (calibrate again)"
        )
    consts = doc.get("constants")
    if not isinstance(consts, dict):
        raise TwinError(f'{where}: missing field "constants"')
    optional = {name: kind for name, (kind, _) in OPTIONAL.items() if name in consts}
    for name, kind in {**CONSTANTS, **optional}.items():
        entry = consts.get(name)
        if not isinstance(entry, dict) or "value" not in entry:
            raise TwinError(f"{where}: missing field constants.{name}.value")
        v = entry["value"]
        ok = isinstance(v, bool) if kind is bool else (isinstance(v, int | float) and not isinstance(v, bool))
        if not ok:
            raise TwinError(f"{where}: constants.{name}.value must be a {kind.__name__}, got {v!r}")
        if kind is not bool and not v >= 0:
            raise TwinError(f"{where}: constants.{name}.value must be >= 0, got {v!r}")
    for name in (
        "prefill_tokens_per_s",
        "max_num_seqs",
        "kv_cache_tokens",
        "block_size",
        "max_model_len",
        *(["max_num_batched_tokens"] if "max_num_batched_tokens" in consts else []),
    ):
        if not consts[name]["value"] > 0:
            raise TwinError(f"{where}: constants.{name}.value must be > 0")


def twin_overrides(doc: dict[str, Any]) -> dict[str, Any]:
    """SimConfig field -> value for a validated profile (the served model name included, when it has one)."""
    consts = doc["constants"]
    out: dict[str, Any] = {name: kind(consts[name]["value"]) for name, kind in CONSTANTS.items()}
    for name, (kind, default) in OPTIONAL.items():
        out[name] = kind(consts[name]["value"]) if name in consts else kind(default)
    model = (doc.get("server") or {}).get("model")
    if isinstance(model, str) and model:
        out["model"] = model
    return out


def load_twin(path: str) -> dict[str, Any]:
    """SimConfig field -> value from the profile at ``path`` (TwinError with one line when it cannot be used)."""
    return twin_overrides(read_twin(path))
