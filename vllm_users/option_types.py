"""Value parsers of the option table: each turns text into a typed value or raises a one-line error."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def _typed(kind: Callable[[str], Any], check: Callable[[Any], bool], want: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, TypeError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {want}") from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {want}")
        return value

    parse.__name__ = want.replace(" ", "_")
    return parse


pos_int = _typed(int, lambda v: v > 0, "a positive integer")
nonneg_int = _typed(int, lambda v: v >= 0, "an integer >= 0")
sampling_seed = _typed(int, lambda v: v >= -1, "an integer >= -1 (-1: none)")
port = _typed(int, lambda v: 0 < v < 65536, "a TCP port (1-65535)")
pos_float = _typed(float, lambda v: v > 0 and not math.isnan(v), "a number > 0")
nonneg_float = _typed(float, lambda v: v >= 0 and not math.isnan(v), "a number >= 0")
ratio = _typed(float, lambda v: 0 <= v < 1, "a ratio in [0, 1)")
fraction = _typed(float, lambda v: 0 <= v <= 1, "a fraction in [0, 1]")


def text(value: str) -> str:
    """Any text (the identity parser, named for error messages)."""
    return value


def rate(value: str) -> float:
    """A request rate: a number > 0 or 'inf'."""
    if value.strip().lower() == "inf":
        return math.inf
    return float(pos_float(value))


def duration(value: str) -> float:
    """Locust-style run time: 90, 90s, 5m, 1h30m -> seconds."""
    t = value.strip().lower()
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
            raise argparse.ArgumentTypeError(f"{value!r} is not a duration like 30s, 5m or 1h30m")
    if num:
        total += float(num)
    if total <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive duration")
    return total


def header(value: str) -> str:
    """Validate 'Name: value'."""
    name, sep, rest = value.partition(":")
    if not sep or not name.strip() or any(c in name for c in " \t\r\n") or "\n" in rest:
        raise argparse.ArgumentTypeError(f"{value!r} is not a header like 'Name: value'")
    return value


_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")


def header_name(value: str) -> str:
    """A header's name (RFC 9110 token), lowercased; "" stays "" (none)."""
    name = value.strip().lower()
    if any(c not in _TOKEN for c in name):
        raise argparse.ArgumentTypeError(f"{value!r} is not a header name like x-served-by")
    return name


def switch(raw: Any) -> bool:
    """A boolean from a config file or an environment variable (1/true/yes/on, 0/false/no/off)."""
    if isinstance(raw, bool):
        return raw
    s = str(raw).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"{raw!r} is not a boolean")


def percentile(value: str) -> float:
    """A percentile in (0, 100)."""
    v = float(pos_float(value))
    if not v < 100:
        raise argparse.ArgumentTypeError(f"{value!r} is not a percentile in (0, 100)")
    return v


def checked_text(parse: Callable[[str], Any], value: str) -> str:
    """`value` stripped, once `parse` accepted it (its ValueError becomes the option's one-line error)."""
    try:
        parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value.strip()


def url_base(value: str) -> str:
    """An http(s) URL prefix, or "" for none."""
    v = value.strip()
    if v and not v.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{value!r} is not an http:// or https:// URL")
    return v
