"""LoRA adapters and priority scheduling (traffic classes): the names the simulator serves besides its model, how much
slower an adapter decodes, and vLLM's `--scheduling-policy priority` order of the waiting queue.

`--lora-modules a,b` (or vLLM's `name=path` items) serves `a` and `b` in /v1/models (vLLM's shape: `root` the
adapter's path, `parent` the base model) and accepts requests to them; `--slow-adapter a:2.0` makes `a`'s
requests take 2x as long per token (the fixed engine: TTFT and ITL x2; the batching engine: one token every
second step). `--scheduling-policy priority`: the waiting queue is ordered by (priority, arrival), lower value
first, as vLLM; preemption takes the lowest-priority running request. Under `fcfs` a request with a priority other
than 0 is a 400, as vLLM answers it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "POLICIES",
    "adapter_entries",
    "check_priority",
    "insert_by_priority",
    "parse_lora_modules",
    "parse_slow",
    "priority_of",
]

POLICIES = ("fcfs", "priority")


def parse_lora_modules(text: str) -> tuple[str, ...]:
    """`a,b` or `a=/path/a b=/path/b` (vLLM's form) -> the adapter names; ValueError naming a bad item."""
    names: list[str] = []
    for item in text.replace(",", " ").split():
        name = item.partition("=")[0].strip()
        if not name:
            raise ValueError(f"--lora-modules: empty adapter name in {item!r}")
        if name in names:
            raise ValueError(f"--lora-modules: {name!r} is named twice")
        names.append(name)
    return tuple(names)


def parse_slow(text: str, adapters: Sequence[str]) -> dict[str, float]:
    """`a:2.0,b:1.5` -> {a: 2.0, b: 1.5}: each a served adapter and a factor >= 1; ValueError otherwise."""
    out: dict[str, float] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, factor = item.rpartition(":")
        try:
            f = float(factor) if sep else float("nan")
        except ValueError:
            f = float("nan")
        if not sep or not f >= 1.0 or f == float("inf"):
            raise ValueError(f"--slow-adapter {item!r}: expected ADAPTER:FACTOR with a factor >= 1")
        if name not in adapters:
            raise ValueError(
                f"--slow-adapter {name!r}: not one of --lora-modules ({', '.join(adapters) or 'none'})"
            )
        out[name] = f
    return out


def adapter_entries(
    base: str, adapters: Iterable[str], created: int, max_model_len: int
) -> list[dict[str, Any]]:
    """The adapters' /v1/models entries, as vLLM lists a LoRA module (after the base model's)."""
    return [
        {
            "id": a,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": f"/adapters/{a}",
            "parent": base,
            "max_model_len": max_model_len,
            "permission": [],
        }
        for a in adapters
    ]


def priority_of(body: dict[str, Any]) -> int:
    """The body's `priority` (vLLM's extension; 0 when absent); ValueError when it is not an integer."""
    p = body.get("priority", 0)
    if p is None:
        return 0
    if isinstance(p, bool) or not isinstance(p, int):
        raise ValueError("priority must be an integer")
    return p


def check_priority(priority: int, policy: str) -> str | None:
    """vLLM's refusal of a priority without priority scheduling (the 400's message), else None."""
    if priority != 0 and policy != "priority":
        return f"Got priority {priority} but Priority scheduling is not enabled."
    return None


def insert_by_priority(queue: Any, item: Any, key: Any) -> None:
    """Insert `item` into the deque `queue`, kept sorted by `key(x)` (stable: after equal keys)."""
    keys = [key(x) for x in queue]
    queue.insert(bisect.bisect_right(keys, key(item)), item)
