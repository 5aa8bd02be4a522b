"""Comments and docstrings say why, never which tracker ticket: a ticket number means nothing to a reader of
the code. Every .py file of the source, test and benchmark folders is read with `tokenize` (comments) and `ast`
(module, class and function docstrings); a citation such as "issue" followed by a number fails the test."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("vllm_users", "orchestration", "vllm_sim", "locustfiles", "scripts", "tests", "benchmarks")
CITATION = re.compile(r"\bissue\s?#?\d+", re.IGNORECASE)


def python_files() -> Iterator[str]:
    """Every .py file under FOLDERS, as a path relative to the repository root."""
    for top in FOLDERS:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                if f.endswith(".py"):
                    yield os.path.relpath(os.path.join(folder, f), ROOT).replace(os.sep, "/")


def citations(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment or docstring of `source` that cites an issue number."""
    found: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and CITATION.search(tok.string):
            found.append((tok.start[0], tok.string.strip()))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                doc = body[0].value.value
                if isinstance(doc, str) and (m := CITATION.search(doc)):
                    found.append((body[0].lineno + doc.count("\n", 0, m.start()), m.group(0)))
    return sorted(found)


def _read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def test_the_reader_finds_comments_and_docstrings_only() -> None:
    """A citation in a comment or a docstring is found, on its line; one in a plain string or a word is not."""
    src = (
        '"""Module.\n\nSee issue 12."""\n'
        "x = 'issue 7'  # the default (Issue #8)\n"
        "def f() -> None:\n"
        '    """Reissue 3 is a verb; issues 4 is not one either."""\n'
        "class C:\n"
        '    """Fixed for ISSUE 9."""\n'
    )
    assert citations(src) == [(3, "issue 12"), (4, "# the default (Issue #8)"), (8, "ISSUE 9")]


def test_no_comment_or_docstring_cites_an_issue_number() -> None:
    """No file cites one; the offenders are named with their lines."""
    offenders = [f"{rel}:{line}: {text}" for rel in python_files() for line, text in citations(_read(rel))]
    assert not offenders, "comments say why, not which issue:\n" + "\n".join(offenders)
