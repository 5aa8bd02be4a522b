"""The packages' import graph, read with `ast`: no module imports itself back through others, and the layers hold
(vllm_sim and vllm_users never import orchestration; vllm_sim never imports vllm_users; orchestration.report
takes from orchestration.capacity only its statistics and cost arithmetic).

Every import counts where it stands: at module level, inside a function, inside `try`, and under
`if TYPE_CHECKING:` too (a type named back up is a dependency back up all the same; a Protocol on the lower side
keeps the arrow one way, as vllm_users.distributed.views.web_ui.MasterView does).
`from pkg import mod` where pkg/mod.py exists is an import of pkg.mod; `from pkg import name` of pkg itself;
relative imports are resolved against the importing module's package.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("vllm_users", "orchestration", "vllm_sim")
Graph = Mapping[str, set[str]]


# ------------------------------------------------------------------------------------- reading the graph
def modules(root: str, packages: Iterable[str]) -> dict[str, str]:
    """Dotted module name -> file, for every .py file of `packages` under `root` (pkg/__init__.py is `pkg`)."""
    out: dict[str, str] = {}
    for pkg in packages:
        for folder, dirs, files in os.walk(os.path.join(root, pkg)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in files:
                if f.endswith(".py"):
                    parts = os.path.relpath(os.path.join(folder, f), root)[: -len(".py")].split(os.sep)
                    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = os.path.join(folder, f)
    return out


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _known(name: str, known: Mapping[str, str]) -> str | None:
    """`name` or its longest prefix that is one of our modules (None for a module of another distribution)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in known:
            return ".".join(parts)
        parts.pop()
    return None


def imports_of(module: str, path: str, known: Mapping[str, str]) -> set[str]:
    """The modules of `known` that `module` (file `path`) imports."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=path)
    package = module if os.path.basename(path) == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        out.update(t for t in (_known(x, known) for x in targets) if t is not None and t != module)
    return out


def import_graph(root: str, packages: Iterable[str]) -> dict[str, set[str]]:
    """module -> the modules it imports, over `packages`."""
    known = modules(root, packages)
    return {m: imports_of(m, p, known) for m, p in sorted(known.items())}


# ------------------------------------------------------------------------------------- finding circles
def find_cycles(graph: Graph) -> list[list[str]]:
    """One circle per strongly connected group of modules, as a path [a, b, ..., a]; [] when there is none."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the graphs here are a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph.get(v, ()):
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_circle(graph, g) for g in sorted(groups)]


def _circle(graph: Graph, group: list[str]) -> list[str]:
    """The shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    return [*paths[v], start]
                if w in members and w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{group} is no circle")  # unreachable for a strongly connected group


def _layer_breaks(graph: Graph, lower: str, upper: str) -> list[str]:
    return sorted(
        f"{m} -> {t}"
        for m, ts in graph.items()
        if m.split(".")[0] == lower
        for t in ts
        if t.split(".")[0] == upper
    )


# ------------------------------------------------------------------------------------- the finder itself
def test_find_cycles_on_a_small_graph() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"a"}}) == [["a", "a"]]
    two = find_cycles({"a": {"b"}, "b": {"a"}, "x": {"y"}, "y": {"z"}, "z": {"x", "a"}})
    assert two == [["a", "b", "a"], ["x", "y", "z", "x"]]


def test_a_new_circle_in_a_package_is_found(tmp_path: Path) -> None:
    """A fake package whose circle runs through a relative, a `from pkg import mod` and a function-level import."""
    pkg = os.path.join(tmp_path, "fakepkg")
    os.makedirs(os.path.join(pkg, "sub"))
    files = {
        "__init__.py": "from fakepkg.util import helper  # a name, not a module: an import of fakepkg.util\n",
        "util.py": "import os\n\ndef helper() -> None:\n    return None\n",
        "a.py": "from . import b  # relative, and b is a module\n",
        "b.py": "from fakepkg.sub import c\n",
        "sub/__init__.py": "",
        "sub/c.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fakepkg import util\n\n"
            "def late() -> None:\n    from ..a import b  # function level, two dots\n"
        ),
    }
    for name, text in files.items():
        with open(os.path.join(pkg, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    graph = import_graph(str(tmp_path), ["fakepkg"])
    assert graph["fakepkg"] == {"fakepkg.util"} and graph["fakepkg.util"] == set()
    assert graph["fakepkg.a"] == {"fakepkg.b"} and graph["fakepkg.b"] == {"fakepkg.sub.c"}
    assert graph["fakepkg.sub.c"] == {"fakepkg.a", "fakepkg.util"}  # the TYPE_CHECKING import counts too
    assert find_cycles(graph) == [["fakepkg.a", "fakepkg.b", "fakepkg.sub.c", "fakepkg.a"]]


# ------------------------------------------------------------------------------------- the real tree
def test_no_import_circle() -> None:
    cycles = find_cycles(import_graph(ROOT, PACKAGES))
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_layers() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert "orchestration.report.postprocess" in graph["orchestration.report.generate"], (
        "the graph was not read"
    )
    assert _layer_breaks(graph, "vllm_sim", "orchestration") == []
    assert (
        _layer_breaks(graph, "vllm_sim", "vllm_users") == []
    )  # the simulator stands alone (its own package)
    # capacity/ runs sweeps and writes their reports: it imports report/, never the other way (the report reads
    # sweeps and repeats through orchestration.report.run_sets, its statistics are report.stats/significance)
    assert (
        sorted(
            f"{m} -> {t}"
            for m, ts in graph.items()
            if m.startswith("orchestration.report.")
            for t in ts
            if t.startswith("orchestration.capacity.")
        )
        == []
    )
    # the end-of-run summary is below both (the launcher and the report print it): it takes only its own tables of
    # groups, which take nothing of orchestration
    summary = ("orchestration.report.summary", "orchestration.report.summary_groups")
    assert sorted(t for t in graph[summary[0]] if t.startswith("orchestration.") and t not in summary) == []
    assert sorted(t for t in graph[summary[1]] if t.startswith("orchestration.")) == []
    # vllm_users (what a user does and measures) never imports orchestration (what runs it)
    assert _layer_breaks(graph, "vllm_users", "orchestration") == []
