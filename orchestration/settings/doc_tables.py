"""The docs tables generated from the registries: docs/scenarios.md's scenarios (`vllm_users.scenarios.registry`)
and docs/traces.md's trace formats (`vllm_users.workload.trace_formats.registry`).

`python -m orchestration.settings.doc_tables` rewrites each table between its two markers in place;
`--check` only says which are stale (exit 1); tests/unit/scenarios/test_scenario_registry.py fails while one is.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from vllm_users.scenarios import registry as scenarios
from vllm_users.workload.trace_formats import registry as trace_formats

__all__ = ["END", "TABLES", "begin", "main", "rendered", "stale"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# docs file -> (the module whose records the table shows, its renderer)
TABLES: dict[str, tuple[str, Callable[[], str]]] = {
    "docs/scenarios.md": ("vllm_users.scenarios.registry", scenarios.docs_table),
    "docs/traces.md": ("vllm_users.workload.trace_formats.registry", trace_formats.docs_table),
}
END = "<!-- end of the generated table -->"


def begin(source: str) -> str:
    """The marker line above a generated table."""
    return (
        f"<!-- generated from {source} by `python -m orchestration.settings.doc_tables`: edit the records -->"
    )


def rendered(doc: str, text: str) -> str:
    """`text` (docs file `doc`) with its table between the markers rendered anew; ValueError without markers."""
    source, table = TABLES[doc]
    head, sep, rest = text.partition(begin(source) + "\n")
    _old, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"{doc}: no generated table (the lines {begin(source)!r} and {END!r})")
    return head + sep + table() + sep2 + tail


def stale(root: str = ROOT) -> list[str]:
    """The docs files whose generated table differs from their registry's."""
    out = []
    for doc in TABLES:
        with open(os.path.join(root, doc), encoding="utf-8") as fh:
            text = fh.read()
        if rendered(doc, text) != text:
            out.append(doc)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the stale tables (or, with --check, name them and exit 1)."""
    p = argparse.ArgumentParser(prog="python -m orchestration.settings.doc_tables", description=__doc__)
    p.add_argument("--check", action="store_true", help="Only name the stale tables (exit 1 if any)")
    a = p.parse_args(argv)
    old = stale()
    if a.check:
        for doc in old:
            print(f"{doc}: its generated table is stale", file=sys.stderr)
        return 1 if old else 0
    for doc in old:
        path = os.path.join(ROOT, doc)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(rendered(doc, text))
        print(f"rewrote the table of {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
