"""The scenario registry: each record is what its class carries, the tables the CLI reads are the ones every
scenario had before the records, the docs table is the records', and importing the registry imports no Locust."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.settings import doc_tables
from vllm_users.scenarios import registry as R

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("rec", R.REGISTRY, ids=lambda r: r.name)
def test_each_record_is_what_its_class_carries(rec: R.Scenario) -> None:
    from locust.shape import LoadTestShape

    module, _, name = rec.user.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert cls.scenario == rec.name
    assert (cls.endpoints, cls.one_request_per_ticket, cls.shape) == (
        rec.endpoints,
        rec.one_request_per_ticket,
        rec.shape,
    )
    assert set(rec.endpoints) <= set(R.EVERY) and set(rec.chat_on) <= set(rec.endpoints)
    if rec.shape:
        shape_module, _, shape_name = rec.shape.partition(":")
        assert issubclass(getattr(importlib.import_module(shape_module), shape_name), LoadTestShape)
    if rec.locustfile:  # the file for plain `locust -f` exposes the record's class
        text = (ROOT / rec.locustfile).read_text()
        assert re.search(rf"^from {re.escape(module)} import .*\b{name}\b", text, re.M)


def test_a_user_class_of_your_own_declares_its_own() -> None:
    from vllm_users.scenarios.chat import ChatUser

    class Mine(ChatUser):
        scenario = "chat"  # a built-in's name on another class: the record is not this class's

    assert Mine.endpoints == ChatUser.endpoints  # inherited, as any class attribute
    from vllm_users.scenarios.base import LLMUser

    assert (LLMUser.endpoints, LLMUser.one_request_per_ticket, LLMUser.shape) == (None, False, None)


def test_the_tables_are_those_of_before_the_records() -> None:
    pooling = ("embeddings", "rerank")
    text = ("chat", "json", "tools", "multi-turn", "burst", "trace", *pooling)
    before = {
        "chat": (*text, "vision", "agent"),
        "completions": text,
        "responses": ("chat", "burst", "trace", *pooling),
        "embeddings": ("chat", *pooling),
        "rerank": ("chat", *pooling),
        "score": ("chat", *pooling),
    }
    assert list(R.ENDPOINT_SCENARIOS) == list(before)
    assert {e: set(n) for e, n in R.ENDPOINT_SCENARIOS.items()} == {e: set(n) for e, n in before.items()}
    assert R.ONE_REQUEST_PER_TICKET == {"chat", "json", "vision", "multi-turn", "embeddings", "rerank"}
    assert R.SCHEDULED_STARTS == R.ONE_REQUEST_PER_TICKET - {"multi-turn"}
    assert R.SHAPES == {"burst": "vllm_users.scenarios.burst:BurstShape"}
    assert R.POOLING_USER == {"embeddings": "embeddings", "rerank": "rerank", "score": "rerank"}
    assert R.ALIASES == {"multiturn": "multi-turn", "multi_turn": "multi-turn", "structured": "json"}
    assert list(R.SCENARIOS) == [
        "chat",
        "json",
        "tools",
        "multi-turn",
        "burst",
        "vision",
        "trace",
        "agent",
        "embeddings",
        "rerank",
    ]
    with pytest.raises(ValueError) as e:
        R.for_endpoint([("tools", 1)], "embeddings")
    assert (
        str(e.value)
        == "scenario 'tools' cannot use --endpoint embeddings: it runs with --endpoint chat|completions"
    )


def test_names_are_unique_over_scenarios_and_aliases() -> None:
    names = [r.name for r in R.REGISTRY] + [a for r in R.REGISTRY for a in r.aliases]
    assert len(names) == len(set(names))


def test_the_docs_tables_are_the_registries() -> None:
    assert doc_tables.stale() == []  # else: python -m orchestration.settings.doc_tables
    text = (ROOT / "docs" / "scenarios.md").read_text()
    assert R.docs_table() in text and all(f"| `{r.name}` |" in text for r in R.REGISTRY)


def test_doc_tables_rewrites_a_stale_table_between_its_markers() -> None:
    doc = "docs/scenarios.md"
    text = (ROOT / doc).read_text()
    old = text.replace("| `chat` |", "| `chatty` |", 1)
    assert old != text and doc_tables.rendered(doc, old) == text
    with pytest.raises(ValueError, match="no generated table"):
        doc_tables.rendered(doc, "# no markers\n")


def test_importing_the_registry_imports_no_locust() -> None:
    code = "import sys, vllm_users.scenarios.registry; print(sorted(m for m in ('locust', 'gevent') if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
