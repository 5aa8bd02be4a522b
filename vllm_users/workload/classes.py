"""Traffic classes: `--class NAME:weight=W[,scenario=S][,model=M][,priority=P][,ttft=MS][,tpot=MS][,e2el=MS]`
(repeatable) or a `classes:` list in `--config`; each request belongs to one class, drawn by weight.

The draw is by the ticket's global index (open loop: the one arrival schedule; closed loop: the master's
request budget), hashed with the seed: deterministic for a seed, the same on every worker, and independent of
which user or worker takes the ticket. A session (multi-turn, tool follow-ups) keeps its first ticket's class.
A class that names a scenario is only drawn by that scenario's users (the weights among the classes a user may
draw are renormalised); `--scenario` must then run that scenario.

The class sets the request's `model` (else `--model`'s mix, else the run's model) and vLLM's `priority`
extension (lower first, as vLLM's `--scheduling-policy priority`), and its own SLO judges its goodput
(`vllm_users/measure/per_class.py`).
"""

from __future__ import annotations

import argparse
import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import accumulate
from typing import Any

from vllm_users.model_mix import ModelMix, draw_unit, parse_mix
from vllm_users.option_spec import LOCUST, RUN, opt
from vllm_users.option_types import checked_text

__all__ = [
    "ClassPlan",
    "TrafficClass",
    "check_scenarios",
    "class_models",
    "class_text",
    "classes_from_json",
    "classes_text",
    "from_config",
    "parse_class",
    "parse_classes",
    "plan_from",
]

SLO_KEYS = ("ttft", "tpot", "e2el")
KEYS = ("weight", "scenario", "model", "priority", *SLO_KEYS)
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class TrafficClass:
    """One class: its name, weight, and what it sets on its requests; SLO limits in ms (None: not judged)."""

    name: str
    weight: float = 1.0
    scenario: str | None = None
    model: str | None = None
    priority: int | None = None
    ttft: float | None = None
    tpot: float | None = None
    e2el: float | None = None

    def slo_ms(self) -> dict[str, float]:
        """The class's own latency limits, by metric (empty: no SLO)."""
        return {k: v for k in SLO_KEYS if (v := getattr(self, k)) is not None}

    def to_text(self) -> str:
        """The class as its --class text (parse_class(to_text()) == self)."""
        parts = [f"weight={self.weight:g}"]
        parts += [
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
            for k in KEYS[1:]
            if (v := getattr(self, k)) is not None
        ]
        return f"{self.name}:{','.join(parts)}"


def _number(cls: str, key: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"--class {cls}: {key}={value!r} is not a number") from None
    if not 0 < x < float("inf"):
        raise ValueError(f"--class {cls}: {key} must be > 0")
    return x


def parse_class(text: str) -> TrafficClass:
    """`NAME:weight=W,...` -> TrafficClass; ValueError naming what is wrong (weight defaults to 1)."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    if not _NAME.match(name):
        raise ValueError(
            f"--class {text!r}: expected NAME:weight=W[,scenario=S][,model=M][,priority=P]"
            "[,ttft=MS][,tpot=MS][,e2el=MS] (NAME of letters, digits, _ . -)"
        )
    kw: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in KEYS:
            raise ValueError(
                f"--class {name}: unknown item {item!r} (expected one of {', '.join(KEYS)} as KEY=VALUE)"
            )
        if key in kw:
            raise ValueError(f"--class {name}: {key} given twice")
        if not value:
            raise ValueError(f"--class {name}: {key} has no value")
        if key in ("weight", *SLO_KEYS):
            kw[key] = _number(name, key, value)
        elif key == "priority":
            try:
                kw[key] = int(value)
            except ValueError:
                raise ValueError(f"--class {name}: priority={value!r} is not an integer") from None
        else:
            kw[key] = value
    return TrafficClass(name, **kw)


def class_text(text: str) -> str:
    """The option table's parser of one --class: validated, kept as text."""
    return checked_text(parse_class, text)


def parse_classes(texts: Iterable[str]) -> tuple[TrafficClass, ...]:
    """Every --class, checked together (names unique)."""
    out = tuple(parse_class(t) for t in texts)
    seen: set[str] = set()
    for c in out:
        if c.name in seen:
            raise ValueError(f"--class {c.name}: named twice")
        seen.add(c.name)
    return out


def from_config(item: Any) -> str:
    """One entry of a config file's `classes:` list (a mapping with `name`, or --class text) as --class text."""
    if isinstance(item, str):
        return item
    if not isinstance(item, Mapping) or "name" not in item:
        raise ValueError(
            f"classes: each entry must be NAME:weight=W text or a mapping with a name, not {item!r}"
        )
    unknown = set(item) - {"name", *KEYS}
    if unknown:
        raise ValueError(f"classes: {item['name']}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    return f"{item['name']}:" + ",".join(f"{k}={item[k]}" for k in KEYS if item.get(k) is not None)


def class_models(texts: Sequence[str]) -> tuple[str, ...]:
    """The model names the classes send to (the preflight checks each); UsageError when the classes clash."""
    from vllm_users.errors import UsageError

    try:
        classes = parse_classes(texts)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return tuple(dict.fromkeys(c.model for c in classes if c.model))


def check_scenarios(texts: Sequence[str], scenarios: Sequence[str]) -> None:
    """UsageError when a class names a scenario the run does not run (its weight would silently go to the
    others); `scenarios`: the --scenario mix's names (a user class's is unknown before it loads: not checked)."""
    from vllm_users.errors import UsageError

    if any(":" in s or "." in s for s in scenarios):
        return
    for c in parse_classes(texts):
        if c.scenario is not None and c.scenario not in scenarios:
            raise UsageError(
                f"--class {c.name}: scenario={c.scenario} is not run (--scenario runs "
                f"{', '.join(scenarios) or 'only -f users'}); add it, e.g. --scenario chat:3,{c.scenario}:1"
            )


def classes_text(classes: Sequence[TrafficClass]) -> str:
    """The classes as the JSON the workers get; "" for none."""
    return json.dumps([asdict(c) for c in classes], separators=(",", ":")) if classes else ""


def classes_from_json(text: str) -> tuple[TrafficClass, ...]:
    """The classes back from classes_text's text (empty for "")."""
    return tuple(TrafficClass(**d) for d in json.loads(text)) if text else ()


def _classes_option(text: str) -> tuple[TrafficClass, ...]:
    """The hidden `vllm_classes` option's value: its JSON parsed once (a one-line error when it is not the
    table's)."""
    try:
        return classes_from_json(text.strip())
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(f"not a class table: {e}") from None


@dataclass(frozen=True)
class Choice:
    """What a request's class sets: its name, model (None: the run's) and priority (None: not sent)."""

    name: str | None
    model: str | None
    priority: int | None


class ClassPlan:
    """The draw of a request's class and model by its ticket's index (one per process, built from the options)."""

    def __init__(self, classes: Sequence[TrafficClass], mix: ModelMix | None, seed: int) -> None:
        self.classes = tuple(classes)
        self.by_name = {c.name: c for c in self.classes}
        self.mix = mix if mix is not None and mix.is_mix else None
        self.seed = seed
        self._cum: dict[str | None, tuple[list[float], tuple[TrafficClass, ...]]] = {}

    @property
    def active(self) -> bool:
        """False when there is nothing to choose (no classes, one model)."""
        return bool(self.classes) or self.mix is not None

    def _eligible(self, scenario: str | None) -> tuple[list[float], tuple[TrafficClass, ...]]:
        if scenario not in self._cum:
            own = tuple(c for c in self.classes if c.scenario is None or c.scenario == scenario)
            self._cum[scenario] = (list(accumulate(c.weight for c in own)), own)
        return self._cum[scenario]

    def draw(self, index: int, scenario: str | None = None) -> TrafficClass | None:
        """The class of ticket `index` among those `scenario`'s users may send (None: no class applies)."""
        cum, own = self._eligible(scenario)
        if not own:
            return None
        u = draw_unit(self.seed, index, "class") * cum[-1]
        return own[min(bisect_right(cum, u), len(own) - 1)]

    def choose(self, index: int, scenario: str | None = None, given: str | None = None) -> Choice:
        """The class (`given`: one already set, e.g. a trace's tenant) and model of ticket `index`."""
        cls = self.by_name.get(given) if given is not None else self.draw(index, scenario)
        name = given if given is not None else (cls.name if cls is not None else None)
        model = cls.model if cls is not None and cls.model else None
        if model is None and self.mix is not None:
            model = self.mix.draw(self.seed, index)
        return Choice(name, model, cls.priority if cls is not None else None)

    def apply(self, body: dict[str, Any], index: int, scenario: str | None, given: str | None) -> str | None:
        """Set the request body's `model` and `priority` for ticket `index`; its class name (None: none)."""
        ch = self.choose(index, scenario, given)
        if ch.model is not None:
            body["model"] = ch.model
        if ch.priority is not None:
            body["priority"] = ch.priority
        return ch.name


def plan_from(classes: Sequence[TrafficClass], model_text: str, seed: int) -> ClassPlan:
    """The process's plan from the `vllm_classes` table and the --model text."""
    return ClassPlan(classes, parse_mix(model_text), seed)


@dataclass(frozen=True)
class ClassOptions:
    """Traffic classes (docs/classes.md)."""

    class_: tuple[str, ...] = opt(
        (),
        class_text,
        "A traffic class (repeatable): NAME:weight=W[,scenario=S][,model=M]"
        "[,priority=P][,ttft=MS][,tpot=MS][,e2el=MS]; per-class goodput and fairness",
        RUN,
        repeat=True,
        metavar="NAME:weight=W,...",
    )
    vllm_classes: tuple[TrafficClass, ...] = opt(
        (),
        _classes_option,
        "(set by `vllm-locust run` from --class) the traffic classes as JSON",
        LOCUST,
        web_ui=False,
        text=classes_text,
    )
