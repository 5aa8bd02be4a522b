"""`vllm-locust run` options: flags named like vLLM's and Locust's, each also from env and a config file.

Precedence: command line > environment (VLLM_LOCUST_<FLAG>) > config file (--config, YAML/JSON) > default.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from vllm_users.exit_codes import USAGE
from vllm_users.measure.metrics import Slo, parse_metric_percentiles, parse_percentile_metrics


class UsageError(Exception):
    """Bad input: the message is one line naming the problem."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line and exits with the documented usage code."""

    def error(self, message: str) -> NoReturn:
        """Print `vllm-locust: error: <message>` and exit USAGE."""
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(USAGE)


def _typed(kind: Callable[[str], Any], check: Callable[[Any], bool], want: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, TypeError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {want}") from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {want}")
        return value

    return parse


pos_int = _typed(int, lambda v: v > 0, "a positive integer")
nonneg_int = _typed(int, lambda v: v >= 0, "an integer >= 0")
pos_float = _typed(float, lambda v: v > 0 and not math.isnan(v), "a number > 0")
nonneg_float = _typed(float, lambda v: v >= 0 and not math.isnan(v), "a number >= 0")
ratio = _typed(float, lambda v: 0 <= v < 1, "a ratio in [0, 1)")
fraction = _typed(float, lambda v: 0 <= v <= 1, "a fraction in [0, 1]")


def rate(text: str) -> float:
    """A request rate: a number > 0 or 'inf'."""
    if text.strip().lower() == "inf":
        return math.inf
    return pos_float(text)


def _checked_by(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """An argparse type that validates `text` with `parse` (ValueError "--flag 'text': why") and keeps it."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).partition(": ")[2]) from None
        return text

    return check


percentile_metrics = _checked_by(parse_percentile_metrics)  # vLLM's --percentile-metrics: ttft,tpot,itl,e2el
metric_percentiles = _checked_by(parse_metric_percentiles)  # vLLM's --metric-percentiles: numbers in (0, 100]


def duration(text: str) -> float:
    """Locust-style run time: 90, 90s, 5m, 1h30m -> seconds."""
    t = text.strip().lower()
    if not t:
        raise argparse.ArgumentTypeError("empty duration")
    total, num = 0.0, ""
    units = {"h": 3600, "m": 60, "s": 1}
    for ch in t:
        if ch.isdigit() or ch == ".":
            num += ch
        elif ch in units and num:
            total += float(num) * units[ch]
            num = ""
        else:
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 5m or 1h30m")
    if num:
        total += float(num)
    if total <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration")
    return total


def window(text: str) -> str:
    """Validate a warm-up/cool-down window (30s, 2m, 200r), keep the text."""
    from vllm_users.measure.windows import Window

    try:
        Window.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text.strip()


def goodput(text: str) -> str:
    """Validate `ttft:MS tpot:MS e2el:MS` now, keep the text."""
    try:
        Slo.parse([text])
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def load_config(path: str) -> dict[str, Any]:
    """Read a YAML or JSON config file of flag -> value; UsageError naming the file when unreadable."""
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if path.endswith(".json"):
            doc = json.loads(text)
        else:
            import yaml

            doc = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 - any parse error is the same user mistake
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"config file {path} is not valid YAML/JSON: {first}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise UsageError(f"config file {path} must hold a mapping of option: value")
    return {str(k).replace("-", "_"): v for k, v in doc.items()}


def apply_defaults(parser: argparse.ArgumentParser, argv: Sequence[str], env_prefix: str = "VLLM_LOCUST_") -> None:
    """Set parser defaults from --config and from the environment (command line still wins)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    cfg_path = known.config or os.environ.get(env_prefix + "CONFIG")
    values: dict[str, Any] = load_config(cfg_path) if cfg_path else {}
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}
    unknown = [k for k in values if k not in actions]
    if unknown:
        raise UsageError(f"config file {cfg_path}: unknown option {unknown[0]!r}")
    for dest in actions:
        env = os.environ.get(env_prefix + dest.upper())
        if env is not None:
            values[dest] = env
    for dest, raw in values.items():
        action = actions[dest]
        try:
            value = _coerce(action, raw)
        except (argparse.ArgumentTypeError, ValueError) as e:
            raise UsageError(f"option {dest.replace('_', '-')} from config/env: {e}") from None
        parser.set_defaults(**{dest: value})


def _coerce(action: argparse.Action, raw: Any) -> Any:
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if isinstance(raw, bool):
            return raw
        s = str(raw).strip().lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"{raw!r} is not a boolean")
    conv: Any = action.type if callable(action.type) else (lambda x: x)
    if action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):  # a list, e.g. header: [...]
        items = raw if isinstance(raw, list) else str(raw).split()
        return [conv(str(x)) for x in items]
    value = conv(str(raw))
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"{raw!r} is not one of {', '.join(map(str, action.choices))}")
    return value
