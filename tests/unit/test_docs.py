"""The docs follow the code: every file and module they name exists, and docs/architecture.md names every package
and top-level module of the layers it draws (a package added, moved or renamed shows up here first)."""

from __future__ import annotations

import ast
import glob
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted(ROOT.glob("docs/*.md")), ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
GENERATED = ("benchmarks/results/",)  # written by the benchmarks, not kept in git: named, never present here

# `orchestration/commands/run.py`, `tests/e2e/test_agreement_*.py`, `orchestration/{commands,report}/`
PATH = re.compile(
    r"(?<![\w./])((?:vllm_users|orchestration|vllm_sim|locustfiles|benchmarks|tests|docker|scripts)"
    r"/(?:[\w./*{},-]*[\w/*}])?)"
)
# `vllm_users.measure.result_builder.build_result`, `vllm_users.scenarios.chat:ChatUser`
DOTTED = re.compile(r"(?<![\w./])((?:vllm_users|orchestration|vllm_sim)(?:\.\w+)+)(?::(\w+))?")


def _expand(path: str) -> list[str]:
    """`a/{b,c}/d` -> [`a/b/d`, `a/c/d`] (one brace group at a time, nested ones too)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if m is None:
        return [path]
    return [x for alt in m.group(1).split(",") for x in _expand(path[: m.start()] + alt + path[m.end() :])]


@cache
def _defined(module_file: Path) -> frozenset[str]:
    """Names a module defines or hands on: defs, classes, assignments, imports, and the strings of `__all__`."""
    tree = ast.parse(module_file.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                out.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(out)


def _module_file(parts: list[str]) -> Path | None:
    for f in (ROOT.joinpath(*parts).with_suffix(".py"), ROOT.joinpath(*parts, "__init__.py")):
        if f.is_file():
            return f
    return None


def _dotted_problem(name: str, attr: str | None) -> str | None:
    """Why `name` (a dotted module path, maybe ending in attributes) names nothing; None when it resolves."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        f = _module_file(parts[:i])
        if f is not None:
            rest = parts[i:] + ([attr] if attr else [])
            if rest and rest[0] not in _defined(f) and rest[0] != "__all__":
                return f"{rest[0]} is not defined in {f.relative_to(ROOT)}"
            return None
    return "no such module"


def stale_references(text: str) -> list[str]:
    """Every path or dotted module name in `text` that names nothing in this tree."""
    out = []
    for m in PATH.finditer(text):
        ref = m.group(1).rstrip(".,")
        if ref.startswith(GENERATED):
            continue
        for p in _expand(ref):
            if not glob.glob(str(ROOT / p)):
                out.append(p)
    for m in DOTTED.finditer(text):
        why = _dotted_problem(m.group(1).rstrip("."), m.group(2))
        if why is not None:
            out.append(f"{m.group(0)} ({why})")
    return out


def test_the_checker_finds_stale_references() -> None:
    text = (
        "see `orchestration/run_cmd.py`, `orchestration.report.cli`, `vllm_users.run_dir.RECORDS_FILE`, "
        "`orchestration/{commands,nowhere}/` and `vllm_users.scenarios.chat:Nope`; "
        "but `orchestration/commands/run.py`, `vllm_users.run_dir.RECORDS`, `tests/e2e/test_agreement_*.py` "
        "and `vllm_users.scenarios.chat:ChatUser` are there"
    )
    assert stale_references(text) == [
        "orchestration/run_cmd.py",
        "orchestration/nowhere/",
        "orchestration.report.cli (cli is not defined in orchestration/report/__init__.py)",
        "vllm_users.run_dir.RECORDS_FILE (RECORDS_FILE is not defined in vllm_users/run_dir.py)",
        "vllm_users.scenarios.chat:Nope (Nope is not defined in vllm_users/scenarios/chat.py)",
    ]


def test_docs_name_only_what_exists() -> None:
    stale = {
        d.relative_to(ROOT).as_posix(): s
        for d in DOCS
        if (s := stale_references(d.read_text(encoding="utf-8")))
    }
    assert not stale, f"the docs name files or modules that do not exist: {stale}"


def _layers() -> list[str]:
    """What docs/architecture.md must name: each package folder, and each module beside the folders."""
    out = ["vllm_sim/", "locustfiles/"]
    for pkg in ("vllm_users", "orchestration"):
        for child in sorted((ROOT / pkg).iterdir()):
            if child.is_dir() and (child / "__init__.py").is_file():
                out.append(f"{pkg}/{child.name}/")
            elif child.suffix == ".py" and child.name != "__init__.py":
                out.append(f"{pkg}/{child.name}")
    return out


def test_architecture_names_every_package_and_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    named = set(_expand_all(PATH.findall(text)))
    missing = [p for p in _layers() if p not in named]
    assert not missing, (
        f"docs/architecture.md does not name {missing} (its picture of the layers is out of date)"
    )
    for guard in (
        "tests/unit/test_import_graph.py",
        "orchestration/commands/__init__.py",
        "vllm_users/errors.py",
    ):
        assert guard in named, guard


def _expand_all(paths: list[str]) -> list[str]:
    """Every path of `paths` with its brace groups expanded, also as `pkg/folder/` for a file inside it."""
    out = []
    for p in paths:
        for x in _expand(p.rstrip(".,")):
            out.append(x)
            if x.count("/") >= 2 and not x.endswith("/"):
                out.append(x.rsplit("/", 1)[0] + "/")
    return out
