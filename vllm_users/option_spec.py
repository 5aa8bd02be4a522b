"""One option's metadata (`Spec`) and the `opt` field that carries it: what every feature's option group declares
its fields with (vllm_users.options composes the groups and walks them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The scopes an option belongs to:
# - LOCUST: registered on Locust's parser (plain `locust -f`, and the master and workers `vllm-locust run` starts);
# - RUN / WORKER: the `vllm-locust run` / `vllm-locust worker` command lines (orchestration.settings.config); `k8s render`
#   takes run's; CALIBRATE: `vllm-locust calibrate` takes these few (the TLS ones).
LOCUST, RUN, WORKER = "locust", "run", "worker"
CALIBRATE = "calibrate"
BOTH = (LOCUST, RUN)


@dataclass(frozen=True)
class Spec:
    """How one option is parsed, shown and routed (the metadata of an option group's field)."""

    parse: Callable[[str], Any] | None  # text -> value, raising a one-line error; None: an on/off switch
    help: str
    scopes: tuple[str, ...]
    choices: tuple[str, ...] | None = None
    short: str = ""  # e.g. -u
    metavar: str | None = None
    many: bool = False  # run: several words joined by spaces (--goodput ttft:500 tpot:50)
    repeat: bool = False  # run: repeatable, a tuple (--header A --header B)
    locust_name: str = ""  # its name on Locust's parser when it differs (Locust owns --stop-timeout)
    web_ui: bool = True  # shown in Locust's web UI
    secret: bool = False  # never written anywhere (the command line is redacted)
    # a structured value (parsed once from its text): its text again, as it travels to Locust processes
    text: Callable[[Any], str] | None = None


def opt(default: Any, parse: Callable[[str], Any] | None, help: str, *scopes: str, **kw: Any) -> Any:
    """A table row: a dataclass field carrying its Spec (a secret stays out of the object's repr)."""
    spec = Spec(parse, help, scopes, **kw)
    return field(default=default, repr=not spec.secret, metadata={"spec": spec})
