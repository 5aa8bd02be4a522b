"""A metric key is spelled once, in its declaration (vllm_users/measure/metric_keys.py): every other module reads
it by its name there (`K.OUTPUT_THROUGHPUT`, `K.TTFT.key("median")`, `K.TTFT.p(99)`), so a renamed or misspelled
key fails at import, not as a silently empty row of a report."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from vllm_users.measure import metric_keys as K

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("vllm_users", "orchestration")
DECLARATION = Path("vllm_users/measure/metric_keys.py")
_NAMES = "|".join(m.name for m in (*K.LATENCIES, *K.REASONING_LATENCIES))
_LATENCY = re.compile(rf"^(mean|median|std|p\d+(\.\d+)?)_({_NAMES})_ms$")
# Keys of one plain word (completed, failed, goodput, ...) also name outcomes, error kinds, options, live counters
# and column headings: for them, only a subscript, a .get() and a dict key count as a read of the metric.
_ONE_WORD = {k for k in K.DECLARED if "_" not in k}
# (module, word): the same spelling naming something other than the run's metric
ALLOWED = {
    # the server's own prefix cache hit rate (vllm:prefix_cache_hits / queries), in its summary and the live tail
    ("orchestration/server/metrics_sampler.py", "prefix_cache_hit_rate"),
    ("orchestration/report/model.py", "prefix_cache_hit_rate"),
    ("vllm_users/distributed/views/live.py", "prefix_cache_hit_rate"),
    # the live feed's counters, summed from the workers' batches while the run goes
    ("vllm_users/distributed/views/live.py", "failed"),
    ("vllm_users/distributed/transport/live_totals.py", "completed"),
    ("vllm_users/distributed/transport/live_totals.py", "failed"),
    ("vllm_users/distributed/transport/master_side.py", "failed"),
    # run_meta.json's copy of the --goodput option (the SLO as typed), not the goodput block of the result
    ("vllm_users/distributed/run_end.py", "goodput"),
    ("vllm_users/measure/result_builder.py", "goodput"),
    ("orchestration/gate/samples.py", "goodput"),
    ("orchestration/report/postprocess.py", "goodput"),
    # a trace's lines skipped as failed requests; the twin check's probe shots
    ("vllm_users/workload/trace_formats/burstgpt.py", "failed"),
    ("orchestration/twin/check.py", "completed"),
    ("orchestration/twin/check.py", "failed"),
    # the `sessions` block's counts of sessions (completed, failed), not the run's counts of requests
    ("vllm_users/measure/session_metrics.py", "completed"),
    ("vllm_users/measure/session_metrics.py", "failed"),
    ("orchestration/report/summary_groups.py", "completed"),
    ("orchestration/report/summary_groups.py", "failed"),
}


def _is_key(value: str) -> bool:
    return value in K.DECLARED or bool(_LATENCY.match(value))


def _reads(tree: ast.AST) -> set[int]:
    """ids of the string constants that index something: x["k"], x.get("k", ...), {"k": ...}."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            out.add(id(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            out.update(id(a) for a in node.args[:1])
        elif isinstance(node, ast.Dict):
            out.update(id(k) for k in node.keys if k is not None)
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }


def spelled(root: Path) -> list[str]:
    """'path:line: key' for every metric key spelled as a string literal outside its declaration under `root`."""
    found = []
    for top in ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == DECLARATION:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            reads, docs = _reads(tree), _docstrings(tree)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docs:
                    continue
                v = node.value
                if not _is_key(v) or (str(rel), v) in ALLOWED or (v in _ONE_WORD and id(node) not in reads):
                    continue
                found.append(f"{rel}:{node.lineno}: {v!r}")
    return found


def test_no_metric_key_is_spelled_outside_its_declaration() -> None:
    found = spelled(REPO)
    assert not found, "read these by their declared names (metric_keys as K):\n" + "\n".join(found)


def test_the_scan_finds_a_key_spelled_in_a_read(tmp_path: Path) -> None:
    mod = tmp_path / "orchestration" / "report"
    mod.mkdir(parents=True)
    (tmp_path / "vllm_users").mkdir()
    (mod / "x.py").write_text(
        '"""output_throughput in a docstring is prose."""\n'
        'A = r.get("p99.9_ttft_ms")\n'
        'B = ("completed", "failed")  # headings\n'
        'C = res["failed"]\n'
        'D = ("Output", "output_throughput")\n'
    )
    assert spelled(tmp_path) == [
        "orchestration/report/x.py:2: 'p99.9_ttft_ms'",
        "orchestration/report/x.py:4: 'failed'",
        "orchestration/report/x.py:5: 'output_throughput'",
    ]


def test_every_allowed_spelling_is_still_there() -> None:
    """An exception that no longer applies is removed, so the list stays the short list of real ones."""
    stale = []
    for path, word in sorted(ALLOWED):
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        if not any(isinstance(n, ast.Constant) and n.value == word for n in ast.walk(tree)):
            stale.append(f"{path}: {word}")
    assert not stale
