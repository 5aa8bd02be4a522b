"""Options of the json, tools and burst scenarios (beside vllm_users.options), for Locust and `vllm-locust run`.

One table feeds both parsers: Locust gets each flag with env var VLLM_LOCUST_<FLAG>; `vllm-locust run`
gets the same flag (default None) and forwards it to the master only when given.
"""

from __future__ import annotations

import argparse
from typing import Any

from locust import events

JSON_MODES = ("response_format", "structured_outputs", "guided_json")

_IN_CORE_OPTIONS = {"--tool-followup"}  # already registered by vllm_users.options

# name, type (None = store_true), Locust default, help
FLAGS: list[tuple[str, Any, Any, str]] = [
    ("--json-schema", str, "", "json: a JSON Schema file to use instead of generated schemas"),
    ("--json-mode", str, "response_format", f"json: how to ask for JSON: {' | '.join(JSON_MODES)}"),
    (
        "--tool-followup",
        None,
        False,
        "tools: send the tool result back and measure the answer (tools-followup)",
    ),
    ("--burst-quiet-users", int, 0, "burst: users while quiet (0 = max(1, spike users / 8))"),
    ("--burst-spike-users", int, 0, "burst: users during the spike (0 = --users)"),
    ("--burst-quiet", float, 10.0, "burst: seconds of quiet before the spike"),
    ("--burst-spike", float, 5.0, "burst: seconds the spike lasts"),
    ("--burst-recover", float, 10.0, "burst: seconds of quiet after the spike"),
    ("--burst-cycles", int, 1, "burst: how many quiet/spike/recover cycles"),
]


@events.init_command_line_parser.add_listener
def _add_locust_options(parser: Any) -> None:
    for name, typ, default, help_text in FLAGS:
        if name in _IN_CORE_OPTIONS:
            continue
        env = "VLLM_LOCUST_" + name.lstrip("-").replace("-", "_").upper()
        if typ is None:
            parser.add_argument(name, env_var=env, action="store_true", default=default, help=help_text)
        elif name == "--json-mode":
            parser.add_argument(name, env_var=env, default=default, choices=JSON_MODES, help=help_text)
        else:
            parser.add_argument(name, env_var=env, type=typ, default=default, help=help_text)


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """Add the scenario flags (and --dataset-format) to the `vllm-locust run` parser."""
    for name, typ, _default, help_text in FLAGS:
        if typ is None:
            p.add_argument(name, action="store_true", default=None, help=help_text)
        elif name == "--json-mode":
            p.add_argument(name, default=None, choices=JSON_MODES, help=help_text)
        else:
            p.add_argument(name, type=typ, default=None, help=help_text)
    p.add_argument(
        "--dataset-format", default=None, choices=["auto", "sharegpt", "jsonl"], help="Dataset format"
    )


def run_locust_args(a: argparse.Namespace) -> list[str]:
    """The scenario flags the user gave to `vllm-locust run`, as master command-line arguments."""
    out: list[str] = []
    for name, typ, _default, _help in FLAGS:
        v = getattr(a, name.lstrip("-").replace("-", "_"), None)
        if v is None or v is False:
            continue
        out += [name] if typ is None else [name, str(v)]
    if getattr(a, "dataset_format", None):
        out += ["--dataset-format", a.dataset_format]
    return out
