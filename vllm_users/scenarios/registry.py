"""Scenario registry: `--scenario NAME[:WEIGHT],...` maps to Locust user classes."""

from __future__ import annotations

import os

SCENARIOS: dict[str, str] = {
    "chat": "vllm_users.scenarios.chat:ChatUser",
    "json": "vllm_users.scenarios.json_user:JsonUser",
    "tools": "vllm_users.scenarios.tools_user:ToolsUser",
    "multi-turn": "vllm_users.scenarios.multiturn:MultiTurnUser",
    "burst": "vllm_users.scenarios.burst:BurstUser",
    "vision": "vllm_users.scenarios.vision:VisionUser",  # images, chat only
    "trace": "vllm_users.scenarios.trace_user:TraceUser",  # --trace FILE (run picks it; docs/traces.md)
    # the pooling users: --endpoint embeddings / rerank / score run them in place of `chat`
    "embeddings": "vllm_users.scenarios.pooling:EmbeddingsUser",
    "rerank": "vllm_users.scenarios.pooling:RerankUser",  # /v1/rerank or /v1/score, by --endpoint
}
# scenarios whose ticket is exactly one request (`--num-prompts N` is then N requests); the others' tickets are
# sessions of several (the tools follow-up), or their users are code that sends what it sends
ONE_REQUEST_PER_TICKET = frozenset({"chat", "json", "vision", "multi-turn", "embeddings", "rerank"})
ALIASES: dict[str, str] = {"multiturn": "multi-turn", "multi_turn": "multi-turn", "structured": "json"}
# scenarios that bring a LoadTestShape (at most one shape per run: the first one wins)
SHAPES: dict[str, str] = {"burst": "vllm_users.scenarios.burst:BurstShape"}


# --endpoint -> the built-in scenarios that can use it (`chat` stands for the pooling user where there is one);
# the pooling users pick their own API, so they mix with any endpoint (rerank: /v1/score with --endpoint score).
# A user class or -f file is not checked (it sends what it sends). docs/scenarios.md "Scenarios and endpoints".
POOLING_USER = {"embeddings": "embeddings", "rerank": "rerank", "score": "rerank"}
_POOLING = ("embeddings", "rerank")
_TEXT = ("chat", "json", "tools", "multi-turn", "burst", "trace", *_POOLING)
ENDPOINT_SCENARIOS: dict[str, tuple[str, ...]] = {
    "chat": (*_TEXT, "vision"),
    "completions": _TEXT,
    "responses": ("chat", "burst", "trace", *_POOLING),
    "embeddings": ("chat", *_POOLING),
    "rerank": ("chat", *_POOLING),
    "score": ("chat", *_POOLING),
}


def for_endpoint(mix: list[tuple[str, int]], endpoint: str) -> list[tuple[str, int]]:
    """The mix an --endpoint runs: `chat` becomes the pooling user of a pooling endpoint; ValueError naming a
    scenario that cannot use it (`--endpoint embeddings --scenario tools`)."""
    allowed = ENDPOINT_SCENARIOS.get(endpoint, _TEXT)
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
