"""docker/grafana's dashboard queries only series that exist: ours as the master's exporter names them, vLLM's as
a real vLLM serves them (tests/data/golden/metrics.txt); it puts ours beside vLLM's where the issue asks, and
shows a fleet per replica and per endpoint."""

from __future__ import annotations

import dataclasses
import json
import re

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.deploy.conftest import ROOT
from tests.unit.measure.helpers import rand_records
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.views import prometheus_export as P
from vllm_users.measure.columns import pack_records
from vllm_users.options import build

DASHBOARD = ROOT / "docker" / "grafana" / "vllm-locust-dashboard.json"
NAME = re.compile(r"\b(vllm_locust_[a-z0-9_]+|vllm:[a-z0-9_]+)")


def _exprs() -> dict[str, list[str]]:
    """Panel title -> its query expressions."""
    d = json.loads(DASHBOARD.read_text())
    return {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in d["panels"]}


def _our_names(tmp_path) -> set[str]:  # type: ignore[no-untyped-def]
    exp = P.Exporter(build(goodput="ttft:100", results_dir=str(tmp_path / "r")))
    c = Collector(str(tmp_path / "r"))
    exp.attach(c)
    hosts, replicas = ("10.0.0.1:8000", "10.0.0.2:8000"), ("r0", "r1")  # a fleet: its series exist too
    recs = [
        dataclasses.replace(r, host=hosts[k % 2], replica=replicas[k // 2 % 2])
        for k, r in enumerate(rand_records(100, seed=1))
    ]
    c.on_batch(
        {
            "worker": "w0",
            "records": "\n".join(r.to_json() for r in recs),
            "n": len(recs),
            "cols": pack_records(recs),
            "hists": {},
            "final": False,
            "totals": {"inflight": 1},
            "health": {"cpu": [0.1], "lag_ms": [1.0]},
        }
    )
    c.close()
    text = generate_latest(exp.registry).decode()
    fams = list(text_string_to_metric_families(text))  # a gauge without a value yet (users) is a family alone
    return {s.name for fam in fams for s in fam.samples} | {fam.name for fam in fams}


def test_every_queried_series_exists(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ours = _our_names(tmp_path)
    golden = (ROOT / "tests" / "data" / "golden" / "metrics.txt").read_text()
    vllm = {s.name for fam in text_string_to_metric_families(golden) for s in fam.samples}
    named = {n for exprs in _exprs().values() for e in exprs for n in NAME.findall(e)}
    assert {n for n in named if n.startswith("vllm_locust_")} <= ours
    assert {n for n in named if n.startswith("vllm:")} <= vllm
    assert len(named) >= 15


def test_ours_beside_vllms() -> None:
    by_panel = {title: " ".join(exprs) for title, exprs in _exprs().items()}

    def panel(*names: str) -> bool:
        return any(all(n in text for n in names) for text in by_panel.values())

    assert panel(
        "histogram_quantile(0.99", "vllm_locust_ttft_seconds_bucket", "vllm:time_to_first_token_seconds"
    )
    assert panel(
        "histogram_quantile(0.5", "vllm_locust_ttft_seconds_bucket", "vllm:time_to_first_token_seconds"
    )
    assert panel("rate(vllm_locust_output_tokens_total", "rate(vllm:generation_tokens_total")
    assert panel("vllm_locust_requests_in_flight", "vllm:num_requests_running")
    assert panel('outcome="failed"', "by (error)")
    assert panel("vllm_locust_itl_seconds_bucket", "vllm:inter_token_latency_seconds_bucket")
    d = json.loads(DASHBOARD.read_text())
    assert d["uid"] and {v["name"] for v in d["templating"]["list"]} == {
        "datasource",
        "instance",
        "model_name",
    }


def test_a_panel_per_replica_and_per_endpoint() -> None:
    """Which replica (endpoint) was slow: TTFT p99 by it, and its request rate by outcome."""
    by_panel = {title: " ".join(exprs) for title, exprs in _exprs().items()}

    def panel(*names: str) -> bool:
        return any(all(n in text for n in names) for text in by_panel.values())

    for part in ("replica", "endpoint"):
        assert panel("histogram_quantile(0.99", f"by (le, {part})", f"vllm_locust_{part}_ttft_seconds_bucket")
        assert panel(f"by ({part}, outcome)", f"rate(vllm_locust_{part}_requests_total")
