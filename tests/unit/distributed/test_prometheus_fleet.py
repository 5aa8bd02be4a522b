"""The exporter's per-endpoint and per-replica series: present only for a fleet (two or more endpoints, replicas),
named and labelled as documented, their counters ending equal to result.json's per_endpoint / per_replica counts and
their histograms holding each group's TTFT and TPOT samples."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.unit.distributed.test_prometheus_export import _fed, _samples, _sum
from tests.unit.measure.helpers import rand_records
from vllm_users.measure.metrics import metric_arrays
from vllm_users.measure.record import RequestRecord
from vllm_users.measure.result_builder import build_run_result

E = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
FLEET_FAMILIES = {
    f"vllm_locust_{part}_{m}"
    for part in ("endpoint", "replica")
    for m in ("requests", "ttft_seconds", "tpot_seconds")
}


def _fleet(n: int, hosts: tuple[str | None, ...], replicas: tuple[str | None, ...]) -> list[RequestRecord]:
    recs = rand_records(n, seed=5, open_loop=True)
    return [
        dataclasses.replace(r, host=hosts[k % len(hosts)], replica=replicas[k * 7 % 11 % len(replicas)])
        for k, r in enumerate(recs)
    ]


def _families(samples: dict[Any, float]) -> set[str]:
    return {
        name.removesuffix("_total").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        for name, _labels in samples
    }


def test_counters_end_equal_to_result_json_s_groups(tmp_path) -> None:  # type: ignore[no-untyped-def]
    recs = _fleet(1200, E, ("r0", "r1"))
    exp, _ = _fed(tmp_path, recs)
    s = _samples(exp)
    res = build_run_result(recs, {"date": "d", "endpoints": list(E)})
    assert res.per_endpoint is not None and res.per_replica is not None
    for part, block in (("endpoint", res.per_endpoint), ("replica", res.per_replica)):
        groups: dict[str, Any] = block["groups"]
        labels = {dict(lab)[part] for name, lab in s if name == f"vllm_locust_{part}_requests_total"}
        assert labels == set(groups) and len(labels) >= 2
        for name, g in groups.items():
            got = {
                o: _sum(s, f"vllm_locust_{part}_requests_total", **{part: name, "outcome": o})
                for o in ("ok", "failed")
            }
            assert got == {"ok": g["completed"], "failed": g["failed"]}, (part, name)
            assert _sum(s, f"vllm_locust_{part}_ttft_seconds_count", **{part: name}) == g["completed"]
    # one endpoint's histogram holds that endpoint's samples: its sum is theirs
    mine = [r for r in recs if r.host == E[1]]
    want = metric_arrays(mine)
    for m in ("ttft", "tpot"):
        total = _sum(s, f"vllm_locust_endpoint_{m}_seconds_sum", endpoint=E[1])
        assert total == pytest.approx(float(want[m].sum()), rel=1e-9), m
        assert _sum(s, f"vllm_locust_endpoint_{m}_seconds_count", endpoint=E[1]) == want[m].size
    # the scenario series are not multiplied: no endpoint label on them
    assert not any(
        ("endpoint", e) in lab for name, lab in s if name == "vllm_locust_requests_total" for e in E
    )


def test_one_endpoint_no_fleet_series(tmp_path) -> None:  # type: ignore[no-untyped-def]
    exp, _ = _fed(tmp_path, _fleet(300, (None,), (None,)))
    assert not _families(_samples(exp)) & FLEET_FAMILIES
    exp, _ = _fed(tmp_path / "one", _fleet(300, (None,), ("r0",)))  # one replica named: no series either
    assert not _families(_samples(exp)) & FLEET_FAMILIES
    # two endpoints, no replica header: endpoint series only
    exp, _ = _fed(tmp_path / "two", _fleet(300, E[:2], (None,)))
    fams = _families(_samples(exp)) & FLEET_FAMILIES
    assert fams == {f"vllm_locust_endpoint_{m}" for m in ("requests", "ttft_seconds", "tpot_seconds")}
    # one URL, replicas named by the header: replica series, named by the header's value alone
    exp, _ = _fed(tmp_path / "reps", _fleet(300, (None,), ("a", "b")))
    s = _samples(exp)
    assert {dict(lab)["replica"] for name, lab in s if name == "vllm_locust_replica_requests_total"} == {
        "a",
        "b",
    }
    assert not any(name.startswith("vllm_locust_endpoint_") for name, _ in s)
