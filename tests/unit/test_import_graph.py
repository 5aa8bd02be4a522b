"""The packages' import graph, read with `ast`: no module imports itself back through others, and the layers hold
(vllm_sim and vllm_users never import orchestration; vllm_sim never imports vllm_users; orchestration.report
takes from orchestration.capacity only its statistics and cost arithmetic).

The layers are the picture in docs/architecture.md, read from the picture itself: each package's boxes, top to
bottom, and side by side within a row. A module may import its own box and any box in a row below it; an import
into a higher row or a box beside it is an arrow back up, and fails, unless the doc's list of arrows that run
back up names it with its reason (and that list holds no arrow the code no longer has).

Every import counts where it stands: at module level, inside a function, inside `try`, and under
`if TYPE_CHECKING:` too (a type named back up is a dependency back up all the same; a Protocol on the lower side
keeps the arrow one way, as vllm_users.distributed.views.web_ui.MasterView does).
`from pkg import mod` where pkg/mod.py exists is an import of pkg.mod; `from pkg import name` of pkg itself;
relative imports are resolved against the importing module's package.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")
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


# ------------------------------------------------------------------------------------- reading the picture
SECTION = re.compile(r"^([a-z_]+)/\s")  # a package's name at column 0 opens its part of the picture
UP_LIST = "Arrows that run back up"  # the doc's list of the allowed ones follows the line that starts so
UP_ARROW = re.compile(r"^- `([\w.]+) -> ([\w.]+)`: (\S.*)$")


@dataclass(frozen=True)
class Box:
    """One box of the picture: its package, its row (0 = top) and column, and the names it draws."""

    package: str
    row: int
    col: int
    names: tuple[str, ...]


def drawn_boxes(text: str) -> tuple[list[str], list[Box]]:
    """The packages in the order the first picture of `text` draws them, and every box of theirs. A box's line
    that starts at its left edge draws a name (`folder/` or `file.py`); an indented line describes it."""
    lines = text.splitlines()
    start = lines.index("```") + 1 if "```" in lines else len(lines)
    end = lines.index("```", start) if "```" in lines[start:] else len(lines)
    packages: list[str] = []
    boxes: dict[tuple[str, int, int], list[str]] = {}
    row = -1
    for line in lines[start:end]:
        if m := SECTION.match(line):
            packages.append(m.group(1))
            row = -1
        elif line.startswith(("┌", "├")):
            row += 1
        elif line.startswith("│") and packages:
            for col, cell in enumerate(line.split("│")[1:-1]):
                names = boxes.setdefault((packages[-1], row, col), [])
                if cell[:2].strip() == "" or not cell.strip():
                    continue  # a description's next line
                name = cell.split()[0]
                if not name.endswith(("/", ".py")):
                    raise ValueError(f"a box's line names no folder/ or file.py at its left edge: {line!r}")
                names.append(name)
    return packages, [Box(p, r, c, tuple(n)) for (p, r, c), n in sorted(boxes.items()) if n]


def box_of(module: str, boxes: Iterable[Box]) -> Box | None:
    """The box that draws `module` (`pkg/__init__.py` is the package's own module), None where none does."""
    package, _, rest = module.partition(".")
    first = rest.split(".")[0]
    hits = [
        b
        for b in boxes
        if b.package == package
        for n in b.names
        if (n == "__init__.py" and not rest)
        or (rest and (n == f"{first}/" or (n == f"{first}.py" and "." not in rest)))
    ]
    if len(hits) > 1:
        raise ValueError(f"{module} is drawn in {len(hits)} boxes")
    return hits[0] if hits else None


def arrows_back_up(graph: Graph, boxes: list[Box]) -> list[str]:
    """Every import of the graph from a box into a higher row of its package or a box beside it, as `a -> b`."""
    out = []
    for m, ts in graph.items():
        a = box_of(m, boxes)
        for t in ts:
            b = box_of(t, boxes)
            if a is None or b is None or a == b or a.package != b.package:
                continue
            if b.row <= a.row:
                out.append(f"{m} -> {t}")
    return sorted(out)


def undrawn(graph: Graph, boxes: list[Box], packages: Iterable[str]) -> list[str]:
    """The modules of the drawn packages that no box draws (an empty package `__init__` needs none)."""
    return sorted(
        m
        for m in graph
        if m.split(".")[0] in packages and box_of(m, boxes) is None and (m.count(".") or graph[m])
    )


def allowed_back_up(text: str) -> dict[str, str]:
    """The doc's list of arrows that run back up: `a -> b` -> why it stays."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(UP_LIST)), None)
    out: dict[str, str] = {}
    for ln in lines[start + 1 :] if start is not None else []:
        if not (m := UP_ARROW.match(ln)):
            break
        out[f"{m.group(1)} -> {m.group(2)}"] = m.group(3)
    return out


def not_leaves(graph: Graph, boxes: list[Box], allowed: Iterable[str]) -> list[str]:
    """The allowed arrows `a -> b` whose `b` imports a module of a's row or above (`b -> c` for each): an arrow
    back up may reach only a leaf, whose imports all stand under a's row, so no circle of boxes runs through it."""
    out = []
    for arrow in allowed:
        source, _, target = arrow.partition(" -> ")
        home = box_of(source, boxes)
        for t in sorted(graph.get(target, ())):
            b = box_of(t, boxes)
            if home is not None and b is not None and b.package == home.package and b.row <= home.row:
                out.append(f"{target} -> {t}")
    return out


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


DRAWING = """Layers

```
top/   the top package
┌──────────────────────┐
│ cli.py   the command │
├───────────┬──────────┤
│ a/  left  │ b.py     │
│     more  │ c/       │
├───────────┴──────────┤
│ __init__.py          │
│ low.py               │
└──────────────────────┘
low/   another package
```
"""


def test_the_picture_is_read_row_by_row_and_box_by_box() -> None:
    packages, boxes = drawn_boxes(DRAWING)
    assert packages == ["top", "low"]
    assert [(b.row, b.col, b.names) for b in boxes] == [
        (0, 0, ("cli.py",)),
        (1, 0, ("a/",)),
        (1, 1, ("b.py", "c/")),
        (2, 0, ("__init__.py", "low.py")),
    ]
    assert box_of("top.a.deep.mod", boxes) == boxes[1] and box_of("top.c", boxes) == boxes[2]
    assert box_of("top", boxes) == boxes[3] and box_of("top.b.x", boxes) is None  # b.py is a file: no b.x
    with pytest.raises(ValueError, match="names no folder"):
        drawn_boxes(DRAWING.replace("│ low.py   ", "│ low mod  "))


def test_an_arrow_up_or_sideways_is_found_and_one_down_is_not() -> None:
    _, boxes = drawn_boxes(DRAWING)
    graph = {
        "top.cli": {"top.a.x", "top.low", "low.m"},  # down, and into another package: fine
        "top.a.x": {"top.a.y", "top.b", "top"},  # its own box; the box beside it; a row below
        "top.a.y": set(),
        "top.b": {"top.c.z"},  # the same box
        "top.c.z": set(),
        "top.low": {"top.cli"},  # two rows up
        "top": set(),
        "top.new": set(),  # drawn nowhere
    }
    assert arrows_back_up(graph, boxes) == ["top.a.x -> top.b", "top.low -> top.cli"]
    assert undrawn(graph, boxes, ["top"]) == ["top.new"]
    text = "x\n" + UP_LIST + ", each with its reason:\n\n- `top.low -> top.cli`: a reason\nafter\n"
    assert allowed_back_up(text.replace("\n\n", "\n")) == {"top.low -> top.cli": "a reason"}
    # an allowed arrow up must reach a leaf: top.c.z imports nothing; top.cli imports rows down to top.low's
    # own (a circle of boxes), and top.b a module of a row above top.low
    assert not_leaves(graph, boxes, ["top.low -> top.c.z"]) == []
    assert not_leaves(graph, boxes, ["top.low -> top.cli"]) == ["top.cli -> top.a.x", "top.cli -> top.low"]
    assert not_leaves(graph, boxes, ["top.low -> top.b"]) == ["top.b -> top.c.z"]


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
    # nor vllm_sim, which stands alone beside it
    assert _layer_breaks(graph, "vllm_users", "vllm_sim") == []


def test_the_drawn_layers_hold() -> None:
    """Every module is in a box of docs/architecture.md's picture, each package imports only those drawn below it,
    and each box only its own and lower rows, but for the arrows the doc lists with their reasons."""
    with open(ARCHITECTURE, encoding="utf-8") as fh:
        text = fh.read()
    packages, boxes = drawn_boxes(text)
    assert packages[:3] == ["orchestration", "vllm_users", "vllm_sim"], packages
    graph = import_graph(ROOT, PACKAGES)
    assert undrawn(graph, boxes, {b.package for b in boxes}) == [], "modules the picture does not draw"
    for i, lower in enumerate(packages):
        for upper in packages[:i]:
            assert _layer_breaks(graph, lower, upper) == [], f"{lower} imports {upper}, drawn above it"
    allowed = allowed_back_up(text)
    found = arrows_back_up(graph, boxes)
    assert [a for a in found if a not in allowed] == [], "arrows that run back up (docs/architecture.md)"
    assert [a for a in allowed if a not in found] == [], "the doc allows arrows the code no longer has"
    assert not_leaves(graph, boxes, allowed) == [], "an allowed arrow back up must reach a leaf"


def test_every_package_folder_has_its_unit_test_folder() -> None:
    """tests/unit mirrors the folders of the packages: vllm_users/measure/ is tested in tests/unit/measure/, each
    with a test file of its own."""
    missing = []
    for pkg in ("vllm_users", "orchestration"):
        for child in sorted(Path(ROOT, pkg).iterdir()):
            if (child / "__init__.py").is_file():
                mirror = Path(ROOT, "tests", "unit", child.name)
                if not any(mirror.glob("test_*.py")):
                    missing.append(f"{pkg}/{child.name}/ -> tests/unit/{child.name}/")
    assert missing == [], "package folders without their unit tests"
