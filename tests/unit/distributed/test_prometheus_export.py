"""The master's Prometheus exporter: fed worker batches, its counters and histograms are the result's figures;
buckets are fine and hold the SLOs as edges; /metrics is served, waits for a last scrape, keeps secrets out."""

from __future__ import annotations

import math
import socket
import threading
import time
from typing import Any

import gevent
import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orchestration.launch.ports import free_port
from tests.unit.measure.helpers import rand_records
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.views import prometheus_export as P
from vllm_users.measure.columns import pack_records
from vllm_users.measure.metrics import Slo, metric_arrays
from vllm_users.measure.record import RequestRecord
from vllm_users.measure.result_fields import compute_metrics
from vllm_users.options import Options, build, locust_argv

GOODPUT = "ttft:37 tpot:13 e2el:1234"


def _batch(
    worker: str, recs: list[RequestRecord], *, cols: bool = True, final: bool = False
) -> dict[str, Any]:
    """A batch as WorkerContext.take_batch builds it."""
    return {
        "worker": worker,
        "records": "\n".join(r.to_json() for r in recs),
        "n": len(recs),
        "cols": pack_records(recs) if cols and recs else None,
        "hists": {},
        "final": final,
        "health": {"cpu": [0.25, 0.5], "lag_ms": [1.0, 7.0, 3.0]},
        "totals": {"inflight": 3},
        "sent_at": time.time(),
    }


def _samples(exp: P.Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value of one scrape."""
    text = generate_latest(exp.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _sum(samples: dict, name: str, **labels: str) -> float:
    return sum(
        v for (n, lab), v in samples.items() if n == name and all((k, x) in lab for k, x in labels.items())
    )


def _fed(tmp_path: Any, recs: list[RequestRecord], goodput: str = GOODPUT) -> tuple[P.Exporter, Collector]:
    exp = P.Exporter(build(goodput=goodput, results_dir=str(tmp_path / "run-x"), model="m"))
    c = Collector(str(tmp_path / "run-x"))
    exp.attach(c)
    for i in range(0, len(recs), 97):  # several batches, from two workers, one without columns
        c.on_batch(_batch(f"w{i % 2}", recs[i : i + 97], cols=i != 97))
    c.close()
    return exp, c


def test_counters_and_histograms_are_the_results_figures(tmp_path) -> None:  # type: ignore[no-untyped-def]
    recs = rand_records(1500, seed=3, open_loop=True, scenarios=("chat", "json"))
    exp, _ = _fed(tmp_path, recs)
    s = _samples(exp)
    slo = Slo.parse([GOODPUT])
    res = compute_metrics(recs, slo=slo)
    assert _sum(s, "vllm_locust_requests_total", outcome="ok") == res["completed"]
    assert _sum(s, "vllm_locust_requests_total", outcome="failed") == res["failed"]
    assert _sum(s, "vllm_locust_requests_total", outcome="interrupted") == res["interrupted"]
    assert _sum(s, "vllm_locust_requests_total", outcome="dropped") == res["arrivals"]["dropped"]
    for kind, n in res["errors_by_kind"].items():
        assert _sum(s, "vllm_locust_requests_total", outcome="failed", error=kind) == n, kind
    assert _sum(s, "vllm_locust_output_tokens_total") == res["total_output_tokens"]
    assert _sum(s, "vllm_locust_input_tokens_total") == res["total_input_tokens"]
    assert _sum(s, "vllm_locust_good_requests_total") == res["goodput"]["good"]
    arrays = metric_arrays(recs)
    for m in ("ttft", "tpot", "itl", "e2el"):
        count = _sum(s, f"vllm_locust_{m}_seconds_count")
        assert count == arrays[m].size == _sum(s, f"vllm_locust_{m}_seconds_bucket", le="+Inf"), m
        assert _sum(s, f"vllm_locust_{m}_seconds_sum") == pytest.approx(float(arrays[m].sum()), rel=1e-9), m
    assert _sum(s, "vllm_locust_ttft_seconds_count") == res["completed"]
    assert _sum(s, "vllm_locust_ttft_seconds_sum") == pytest.approx(
        res["mean_ttft_ms"] * res["completed"] / 1e3
    )
    # the SLO is a bucket edge: its cumulative count is exactly the requests within it
    within = _sum(s, "vllm_locust_ttft_seconds_bucket", le="0.037")
    assert within == int((arrays["ttft"] <= 0.037).sum())
    # per scenario: the same split as the result's per-scenario figures
    for scen in ("chat", "json"):
        sub = [r for r in recs if r.scenario == scen]
        part = compute_metrics(sub)
        assert _sum(s, "vllm_locust_requests_total", scenario=scen, outcome="ok") == part["completed"]
        assert _sum(s, "vllm_locust_ttft_seconds_count", scenario=scen) == part["completed"]


def test_workers_health_and_run_gauges(tmp_path) -> None:  # type: ignore[no-untyped-def]
    recs = rand_records(200, seed=1)
    exp, c = _fed(tmp_path, recs, goodput="")
    s = _samples(exp)
    assert _sum(s, "vllm_locust_requests_in_flight") == 6  # 3 in flight at each of two workers
    assert _sum(s, "vllm_locust_worker_cpu_ratio", worker="w0") == 0.5  # its latest sample
    assert _sum(s, "vllm_locust_worker_loop_lag_seconds", worker="w1") == pytest.approx(
        0.007
    )  # the batch's max
    assert _sum(s, "vllm_locust_workers", state="live") == 2
    assert _sum(s, "vllm_locust_run_info", run="run-x", model="m") == 1
    assert _sum(s, "vllm_locust_run_finished") == 0
    assert not any(n == "vllm_locust_good_requests_total" for n, _ in s)  # no SLO, no goodput counter
    exp.finish()
    assert _sum(_samples(exp), "vllm_locust_run_finished") == 1


def test_buckets_are_fine_and_hold_the_slos_as_edges() -> None:
    b = P.buckets(Slo.parse(["ttft:37 tpot:13.5 e2el:1234"]))
    for m, edges in b.items():
        assert list(edges) == sorted(set(edges)) and len(edges) >= 80, m
        ratios = np.asarray(edges[1:]) / np.asarray(edges[:-1])
        assert ratios.max() <= 1.17, m  # histogram_quantile interpolates inside a bucket: each spans <= 17 %
    assert 0.037 in b["ttft"] and 0.0135 in b["tpot"] and 0.0135 in b["itl"] and 1.234 in b["e2el"]
    assert 0.0135 not in P.buckets(None)["tpot"] and 0.5 in P.buckets(None)["ttft"]
    assert b["ttft"][0] <= 0.001 and b["ttft"][-1] >= 300 and b["itl"][0] <= 0.0001 and b["e2el"][-1] >= 1800


def test_option_reaches_the_master() -> None:
    o = build(prometheus_port=9409)
    assert locust_argv(o)[-2:] == ["--prometheus-port", "9409"]
    assert P.serve(None, Options()) is None  # no port, no exporter


def _get(port: int) -> str:
    """GET /metrics over a plain socket (HTTP/1.0: the server closes after the body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sk:
        sk.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b"".join(iter(lambda: sk.recv(1 << 16), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0], head
    return body.decode()


def test_served_and_the_last_scrape_is_waited_for(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("VLLM_LOCUST_API_KEY", "sk-SECRET-1")
    port = free_port()
    o = build(
        prometheus_port=port,
        results_dir=str(tmp_path / "r"),
        header=("Authorization: Bearer sk-SECRET-2",),
        extra_headers='{"Authorization": "Bearer sk-SECRET-3"}',
    )
    exp = P.serve(None, o)
    assert exp is not None
    c = Collector(str(tmp_path / "r"))
    exp.attach(c)
    got: list[str] = []
    closed = threading.Event()

    def scrape() -> None:  # a real thread: a Prometheus server outside the master's gevent loop
        while not closed.is_set():
            got.append(_get(port))
            closed.wait(0.15)

    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    try:
        while len(got) < 2:
            gevent.sleep(0.05)
        c.on_batch(_batch("w0", rand_records(50, seed=2)))
        exp.finish()
        t0 = time.time()
        n = len(got)
        exp.close()  # a scraper was seen: the master waits for one more scrape (~0.15 s here), then closes
        closed.set()
        assert len(got) > n and time.time() - t0 < 3
        assert "vllm_locust_run_finished 1.0" in got[-1] and "vllm_locust_ttft_seconds_bucket" in got[-1]
        assert not any("SECRET" in text for text in got)
    finally:
        closed.set()
        c.close()
        t.join(10)
    with pytest.raises(OSError):  # closed: the port is free again
        _get(port)


def test_no_scraper_no_wait(tmp_path) -> None:  # type: ignore[no-untyped-def]
    exp = P.serve(None, build(prometheus_port=free_port(), results_dir=str(tmp_path)))
    assert exp is not None
    t0 = time.time()
    exp.close()
    assert time.time() - t0 < 1


def test_port_in_use_is_one_error_line_not_a_crash(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert P.serve(None, build(prometheus_port=port, results_dir=str(tmp_path))) is None
    assert any(f"--prometheus-port {port}" in r.getMessage() for r in caplog.records)


def test_a_bad_batch_does_not_stop_the_ingest(tmp_path) -> None:  # type: ignore[no-untyped-def]
    exp = P.Exporter(build(results_dir=str(tmp_path)))
    c = Collector(str(tmp_path))
    exp.attach(c)
    bad = _batch("w0", rand_records(5, seed=1))
    bad["cols"] = b"garbage"
    c.on_batch(bad)  # the records are written; the exporter logs and skips the batch
    c.on_batch(_batch("w0", rand_records(5, seed=1)))
    c.close()
    assert c.workers["w0"].records == 10
    assert _sum(_samples(exp), "vllm_locust_requests_total") == 5
    assert not math.isnan(_sum(_samples(exp), "vllm_locust_batches_total"))
