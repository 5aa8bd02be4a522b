"""Write files so that no reader ever sees half of one: a temporary name, then an atomic rename."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


def write_atomic(path: str, data: str | bytes) -> None:
    """Write `data` to `path` through `path.tmp` and os.replace."""
    tmp = path + ".tmp"
    with open(
        tmp, "wb" if isinstance(data, bytes) else "w", encoding=None if isinstance(data, bytes) else "utf-8"
    ) as fh:
        fh.write(data)
    os.replace(tmp, path)


def atomic_json(path: str, obj: Any, indent: int = 2, default: Callable[[Any], Any] = str) -> None:
    """Write `obj` as JSON atomically (objects JSON cannot encode go through `default`)."""
    write_atomic(path, json.dumps(obj, indent=indent, default=default))
