"""Bring your own user: resolve `--scenario` mixes (built-in names, `package.module:Class`) and `-f` locustfiles
into the Locust user classes a run's generated locustfile exposes.

`python -m vllm_users.scenarios.loader [--scenario S] [-f FILE ...]` checks a mix in a process of its own (a
user file imports Locust, which monkey-patches; the `vllm-locust` CLI must not) and prints the users it found
as one JSON line, or one error line and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from vllm_users.errors import UserClassError  # raised here; importable from here too
from vllm_users.exit_codes import USAGE
from vllm_users.scenarios.registry import SCENARIOS, SHAPES, is_class_ref


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def _llm_user() -> type:
    from vllm_users.scenarios.base import LLMUser

    return LLMUser


def load_class(ref: str) -> Any:
    """The class named by `package.module:Class`; UserClassError unless it is a runnable LLMUser subclass."""
    module_name, _, cls_name = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - whatever the import raises, the user named a module that fails
        raise UserClassError(f"--scenario {ref}: cannot import {module_name}: {_first_line(e)}") from None
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise UserClassError(f"--scenario {ref}: module {module_name} has no attribute {cls_name!r}")
    if not inspect.isclass(cls) or not issubclass(cls, _llm_user()):
        raise UserClassError(f"--scenario {ref}: {cls_name} is not a subclass of vllm_users.LLMUser")
    if cls.__dict__.get("abstract", False):
        raise UserClassError(f"--scenario {ref}: {cls_name} is abstract (abstract = True)")
    return cls


def load_file(path: str) -> tuple[dict[str, type], list[type]]:
    """Import a locustfile; its runnable LLMUser classes by name and its LoadTestShape classes."""
    if not os.path.isfile(path):
        raise UserClassError(f"-f {path}: no such file")
    if not path.endswith(".py"):
        raise UserClassError(f"-f {path}: expected a Python file (.py)")
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if directory not in sys.path:  # like Locust: modules beside the locustfile are importable from it
        sys.path.insert(0, directory)
    name = "vllm_locust_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserClassError(f"-f {path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any error while importing the user's file is reported the same way
        raise UserClassError(f"-f {path}: import failed: {_first_line(e)}") from None
    from locust import User
    from locust.shape import LoadTestShape

    base = _llm_user()
    users: dict[str, type] = {}
    shapes: list[type] = []
    for key, value in vars(module).items():
        if not inspect.isclass(value):
            continue
        if (
            issubclass(value, LoadTestShape)
            and not value.__dict__.get("abstract", False)
            and value is not LoadTestShape
        ):
            shapes.append(value)
        elif issubclass(value, User) and not value.abstract:
            if not issubclass(value, base):
                raise UserClassError(
                    f"-f {path}: {key} is a Locust User but not a vllm_users.LLMUser subclass"
                )
            users[key] = value
    if not users:
        raise UserClassError(
            f"-f {path}: no LLMUser subclass in it (subclass vllm_users.LLMUser or ChatUser)"
        )
    return users, shapes


def user_namespace(mix: Sequence[tuple[str, int]], files: Sequence[str] = ()) -> dict[str, Any]:
    """What a generated locustfile exposes: one class per mix entry (weights applied), file users, one shape."""
    out: dict[str, Any] = {}
    shapes: list[type] = []
    cls: Any
    for name, weight in mix:
        if is_class_ref(name):
            cls = load_class(name)
            alias = cls.__name__ if cls.__name__ not in out else f"{cls.__name__}_{len(out)}"
        else:
            module, _, cls_name = SCENARIOS[name].partition(":")
            cls = getattr(importlib.import_module(module), cls_name)
            alias = f"{cls_name}_{name.replace('-', '_')}"
            if name in SHAPES:
                shape_module, _, shape_name = SHAPES[name].partition(":")
                shapes.append(getattr(importlib.import_module(shape_module), shape_name))
        # a subclass per entry: the weight is the mix's, and the base imported here never runs on its own
        out[alias] = type(
            alias, (cls,), {"weight": weight or cls.weight, "abstract": False, "__module__": __name__}
        )
    for path in files:
        users, file_shapes = load_file(path)
        for key, cls in users.items():
            if key in out:
                raise UserClassError(f"-f {path}: user class {key} is given twice")
            out[key] = cls
        shapes += file_shapes
    if not out:
        raise UserClassError("no user class: give --scenario or -f")
    if shapes:  # Locust runs at most one shape
        out[shapes[0].__name__] = shapes[0]
    return out


def describe(namespace: dict[str, Any]) -> dict[str, Any]:
    """Users (name -> scenario, weight) and the shape of a namespace, as plain JSON."""
    from locust.shape import LoadTestShape

    users = {
        k: {"scenario": v.scenario, "weight": v.weight}
        for k, v in namespace.items()
        if not issubclass(v, LoadTestShape)
    }
    shapes = [k for k, v in namespace.items() if issubclass(v, LoadTestShape)]
    return {"users": users, "shape": shapes[0] if shapes else None}


def main(argv: Sequence[str] | None = None) -> int:
    """Check a mix and locustfiles; print what they hold as JSON, or one error line and exit 2."""
    p = argparse.ArgumentParser(prog="vllm_users.scenarios.loader")
    p.add_argument("--scenario", default="")
    p.add_argument("-f", "--locustfile", action="append", default=[])
    a = p.parse_args(argv)
    from vllm_users.scenarios.registry import parse_mix

    try:
        mix = parse_mix(a.scenario) if a.scenario else []
        print(json.dumps(describe(user_namespace(mix, a.locustfile))), flush=True)
    except ValueError as e:  # UserClassError or a bad mix
        print(f"error: {e}", file=sys.stderr, flush=True)
        return USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
