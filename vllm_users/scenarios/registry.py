"""Scenario registry: `--scenario NAME[:WEIGHT],...` maps to Locust user classes.

Each built-in scenario is one `Scenario` record in `REGISTRY`: its user class (as `package.module:Class`), the
endpoints it runs with, whether a ticket is one request, the shape it brings, its docs row. The module holds
strings only: the CLI reads it without importing Locust (which monkey-patches whatever imports it), and a
Locust process imports a user class only when a mix names it. The tables below are views of the records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vllm_users.client.responses import APIS

__all__ = [
    "ALIASES",
    "ENDPOINT_SCENARIOS",
    "ONE_REQUEST_PER_TICKET",
    "POOLING_USER",
    "REGISTRY",
    "SCENARIOS",
    "SCHEDULED_STARTS",
    "SHAPES",
    "Scenario",
    "docs_table",
    "for_endpoint",
    "is_class_ref",
    "locustfile_source",
    "mix_label",
    "parse_mix",
]

TEXT = ("chat", "completions")
EVERY = APIS


@dataclass(frozen=True)
class Scenario:
    """One built-in scenario, declared once: `LLMUser.__init_subclass__` copies its attributes onto its class
    (`ChatUser.endpoints`), and the CLI, the docs table and the report read them here without importing it."""

    name: str  # --scenario NAME
    user: str  # its LLMUser subclass, `package.module:Class` (imported only by the Locust processes)
    summary: str  # docs/scenarios.md's table: what it measures
    # the --endpoint values it runs with; another is a one-line error before the load
    endpoints: tuple[str, ...]
    # each ticket is exactly one request: `--num-prompts N` is N requests (the progress line's `ok N/TOTAL`)
    one_request_per_ticket: bool = False
    # an open-loop schedule sets every start of its requests (None: as one_request_per_ticket)
    scheduled_starts: bool | None = None
    shape: str | None = None  # `package.module:Class` of the LoadTestShape it brings (one a run: the first)
    chat_on: tuple[str, ...] = ()  # the endpoints on which `chat` means this user (the pooling users)
    aliases: tuple[str, ...] = ()  # other names --scenario takes for it
    locustfile: str | None = None  # its file for plain `locust -f`


_POOLING = "vllm_users.scenarios.pooling"
# the built-in scenarios, in the order of docs/scenarios.md's table; a new one is one record here
REGISTRY: tuple[Scenario, ...] = (
    Scenario(
        "chat",
        "vllm_users.scenarios.chat:ChatUser",
        "random text at exact lengths, or a dataset",
        EVERY,  # on a pooling endpoint `chat` stands for its pooling user (`chat_on` below)
        one_request_per_ticket=True,
        locustfile="locustfiles/chat.py",
    ),
    Scenario(
        "json",
        "vllm_users.scenarios.json_user:JsonUser",
        "structured output; every answer validated",
        TEXT,
        one_request_per_ticket=True,
        aliases=("structured",),
        locustfile="locustfiles/json.py",
    ),
    Scenario(
        "tools",
        "vllm_users.scenarios.tools_user:ToolsUser",
        "tool calls validated; optional follow-up",
        TEXT,  # a ticket is a session: the call and its follow-up
        locustfile="locustfiles/tools.py",
    ),
    Scenario(
        "multi-turn",
        "vllm_users.scenarios.multiturn:MultiTurnUser",
        "conversations reusing their prefix",
        TEXT,
        one_request_per_ticket=True,
        scheduled_starts=False,  # a later turn starts when the one before completed
        aliases=("multiturn", "multi_turn"),
        locustfile="locustfiles/multiturn.py",
    ),
    Scenario(
        "burst",
        "vllm_users.scenarios.burst:BurstUser",
        "quiet → spike → recover",
        ("chat", "completions", "responses"),
        shape="vllm_users.scenarios.burst:BurstShape",
        locustfile="locustfiles/burst.py",
    ),
    Scenario(
        "vision",
        "vllm_users.scenarios.vision:VisionUser",
        "chat prompts with images (`--images`)",
        ("chat",),
        one_request_per_ticket=True,
    ),
    Scenario(
        "trace",
        "vllm_users.scenarios.trace_user:TraceUser",
        "a trace's requests at its timestamps (`--trace FILE`, docs/traces.md)",
        ("chat", "completions", "responses"),  # a line's own `endpoint` may name any
    ),
    Scenario(
        "agent",
        "vllm_users.scenarios.agent_user:AgentUser",
        "synthetic coding-agent sessions: calls, tool waits, subagents forked and joined (docs/agents.md)",
        ("chat",),
    ),
    Scenario(
        "embeddings",
        f"{_POOLING}:EmbeddingsUser",
        "`/v1/embeddings`, `--embed-batch` inputs a request",
        EVERY,  # the pooling users pick their own API, so they mix with any endpoint
        one_request_per_ticket=True,
        chat_on=("embeddings",),
        locustfile="locustfiles/embeddings.py",
    ),
    Scenario(
        "rerank",
        f"{_POOLING}:RerankUser",
        "`/v1/rerank` (or `/v1/score` with `--endpoint score`), `--rerank-docs` a query",
        EVERY,
        one_request_per_ticket=True,
        chat_on=("rerank", "score"),
        locustfile="locustfiles/rerank.py",
    ),
)

_BY_NAME = {s.name: s for s in REGISTRY}
SCENARIOS: dict[str, str] = {s.name: s.user for s in REGISTRY}
ALIASES: dict[str, str] = {a: s.name for s in REGISTRY for a in s.aliases}
# scenarios whose ticket is exactly one request (`--num-prompts N` is then N requests); the others' tickets
# are sessions of several (the tools follow-up), or their users are code that sends what it sends
ONE_REQUEST_PER_TICKET = frozenset(s.name for s in REGISTRY if s.one_request_per_ticket)
# scenarios whose every request starts on its ticket: an open-loop schedule fixes each start before the load
SCHEDULED_STARTS = frozenset(
    s.name
    for s in REGISTRY
    if (s.one_request_per_ticket if s.scheduled_starts is None else s.scheduled_starts)
)
SHAPES: dict[str, str] = {s.name: s.shape for s in REGISTRY if s.shape}
POOLING_USER: dict[str, str] = {e: s.name for s in REGISTRY for e in s.chat_on}
# --endpoint -> the built-in scenarios that can use it. A user class or -f file is not checked (it sends what
# it sends). docs/scenarios.md "Scenarios and endpoints".
ENDPOINT_SCENARIOS: dict[str, tuple[str, ...]] = {
    e: tuple(s.name for s in REGISTRY if e in s.endpoints) for e in APIS
}


def scenario(name: str) -> Scenario | None:
    """The record of a built-in scenario (None for a class reference or an unknown name)."""
    return _BY_NAME.get(name)


def docs_table() -> str:
    """docs/scenarios.md's table of the built-in scenarios, from their records (a test checks the docs)."""
    rows = [
        "| scenario | user class | locustfile | `--endpoint` | what it measures |",
        "|---|---|---|---|---|",
    ]
    for s in REGISTRY:
        user = f"`{s.user}`" + (f" + `{s.shape.rpartition(':')[2]}`" if s.shape else "")
        ends = "any" if s.endpoints == EVERY else ", ".join(s.endpoints)
        rows.append(
            f"| `{s.name}` | {user} | {f'`{s.locustfile}`' if s.locustfile else '-'} | {ends} | {s.summary} |"
        )
    return "\n".join(rows) + "\n"


def for_endpoint(mix: list[tuple[str, int]], endpoint: str) -> list[tuple[str, int]]:
    """The mix an --endpoint runs: `chat` becomes the pooling user of a pooling endpoint; ValueError naming a
    scenario that cannot use it (`--endpoint embeddings --scenario tools`)."""
    allowed = ENDPOINT_SCENARIOS.get(endpoint, ENDPOINT_SCENARIOS["completions"])
    out: dict[str, int] = {}
    for name, weight in mix:
        if name in SCENARIOS and name not in allowed:
            needs = "|".join(e for e, names in ENDPOINT_SCENARIOS.items() if name in names)
            raise ValueError(
                f"scenario {name!r} cannot use --endpoint {endpoint}: it runs with --endpoint {needs}"
            )
        if name == "chat" and endpoint in POOLING_USER:
            name = POOLING_USER[endpoint]
        out[name] = out.get(name, 0) + weight  # `chat:1,embeddings:2` with --endpoint embeddings: one user, 3
    return list(out.items())


def is_class_ref(name: str) -> bool:
    """True for a user class reference `package.module:Class` (not a built-in scenario name)."""
    module, sep, cls = name.partition(":")
    return bool(sep) and module.replace(".", "").replace("_", "").isalnum() and cls.isidentifier()


def parse_mix(text: str) -> list[tuple[str, int]]:
    """`chat:3,json:1,pkg.mod:Agent:2` -> [("chat", 3), ("json", 1), ("pkg.mod:Agent", 2)]; ValueError naming the
    bad part. A class reference without a weight gets 0: the class's own `weight`."""
    out: list[tuple[str, int]] = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        name, _, w = part.partition(":")
        name = ALIASES.get(name.strip(), name.strip())
        if name not in SCENARIOS and w:  # package.module:Class[:WEIGHT]
            cls, _, w = w.partition(":")
            ref = f"{name}:{cls.strip()}"
            if not is_class_ref(ref):
                raise ValueError(
                    f"{part!r} is neither a scenario ({', '.join(sorted(SCENARIOS))}) nor package.module:Class"
                )
            name, default = ref, 0
        elif name not in SCENARIOS:
            raise ValueError(
                f"unknown scenario {name!r} (available: {', '.join(sorted(SCENARIOS))}, "
                "or package.module:Class)"
            )
        else:
            default = 1
        try:
            weight = int(w) if w else default
        except ValueError:
            raise ValueError(f"scenario weight in {part!r} is not an integer") from None
        if weight < 1 and w:
            raise ValueError(f"scenario weight in {part!r} must be >= 1")
        out.append((name, weight))
    if not out:
        raise ValueError("no scenario given")
    dup = sorted({n for n, _ in out if sum(1 for m, _ in out if m == n) > 1})
    if dup:
        raise ValueError(f"scenario {dup[0]!r} given twice")
    return out


def mix_label(mix: list[tuple[str, int]], files: list[str]) -> str:
    """A short name for the run directory: scenario names, class names and locustfile stems joined by '+'."""
    names = [n.rpartition(":")[2] if is_class_ref(n) else n for n, _ in mix]
    names += [os.path.splitext(os.path.basename(f))[0] for f in files]
    return "+".join(names)


def locustfile_source(mix: list[tuple[str, int]], files: list[str] | None = None) -> str:
    """The text of a locustfile that runs these scenarios (weights applied) and the users of these locustfiles."""
    paths = [os.path.abspath(f) for f in files or []]
    return (
        '"""Generated by vllm-locust run."""\n'
        "import vllm_users.distributed.plugin  # noqa: F401 - the option table and listeners, on every process\n"
        "from vllm_users.scenarios.loader import user_namespace as _users\n\n"
        f"globals().update(_users({mix!r}, {paths!r}))\n"
    )
