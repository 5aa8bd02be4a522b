"""Live Prometheus metrics from the master (or local runner): `--prometheus-port P` serves `/metrics`.

Fed by the master's ingest of each worker batch (`Collector.on_ingest`): the batch's record columns give, per
scenario, the TTFT/TPOT/ITL/E2EL samples and the request, token and goodput counts, by the very definitions the
result uses (vllm_users.measure.metrics), so the counters end equal to result.json's figures. Samples are counted
into fixed buckets with numpy (one searchsorted + bincount per metric and batch, no per-sample Python), and
prometheus_client builds the metric families only when scraped (a custom collector, as vllm_sim.metrics does).
Buckets: a fixed fine log-spaced set ("nice" values, 21 per decade: a bucket spans at most 17 %) plus the
--goodput SLO values as exact edges, so `le="<SLO>"` counts exactly the requests within it. The gauges come
from the workers' totals and health in the same batches. Labels hold scenario names, outcomes, error kinds,
worker names, the run's directory name and the model: never a header, an API key or the host URL. A fleet (two
or more endpoints or replicas) adds per-endpoint and per-replica series (prometheus_fleet.py), labelled by
host:port and the replica header's values.

A headless master ends with the run; when something has been scraping it, it waits (bounded) for one more
scrape after the final figures, so the last scrape of a Prometheus server sees the run's totals.
"""

from __future__ import annotations

import io
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import numpy as np
from gevent.pywsgi import WSGIServer
from locust.env import Environment
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.transport.messages import Batch
from vllm_users.distributed.views.gpu_tail import GpuTail
from vllm_users.distributed.views.prometheus_fleet import FleetSeries, is_fleet
from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import Columns, _merge, _unpack, columns_from_records
from vllm_users.measure.metrics import METRICS, Slo, metric_arrays, ok_rows, or_zero, sent_rows, slo_met
from vllm_users.measure.record import parse_lines
from vllm_users.options import Options

__all__ = ["LAST_SCRAPE_WAIT_MAX_S", "NICE", "RANGES_S", "Exporter", "buckets", "serve"]

log = logging.getLogger("vllm_locust")

PREFIX = "vllm_locust_"
# the mantissas of each decade's edges: round values (SLOs like 250 ms or 1.5 s fall on one), ratios <= 1.167
NICE = (
    1.0,
    1.1,
    1.2,
    1.3,
    1.5,
    1.6,
    1.8,
    2.0,
    2.2,
    2.5,
    2.8,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    5.5,
    6.0,
    7.0,
    8.0,
    9.0,
)
RANGES_S = {"ttft": (1e-3, 600.0), "tpot": (1e-4, 60.0), "itl": (1e-4, 60.0), "e2el": (1e-2, 3600.0)}
# which --goodput objective becomes an edge of which histogram (ITL is what a TPOT objective is read against)
SLO_EDGES = {"ttft": ("ttft",), "tpot": ("tpot",), "itl": ("tpot",), "e2el": ("e2el",)}
LAST_SCRAPE_WAIT_MAX_S = 30.0  # at most this long after the final figures for a scraper's next visit
_DOC = {m.name: m.doc for m in K.LATENCIES}  # the histograms' help, from the metrics' declaration


def buckets(slo: Slo | None) -> dict[str, tuple[float, ...]]:
    """Each metric's bucket edges in seconds: the fine fixed set over its range, plus the SLO limits."""
    out = {}
    for m, (lo, hi) in RANGES_S.items():
        edges = {
            float(f"{x}e{e}")
            for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for x in NICE
        }  # decimal text: 0.25, not 0.25000000000000006
        edges = {x for x in edges if lo <= x <= hi}
        if slo is not None:
            edges |= {slo.limits_ms[k] / 1e3 for k in SLO_EDGES[m] if k in slo.limits_ms}
        out[m] = tuple(sorted(edges))
    return out


class _Hist:
    """Cumulative bucket counts, count and sum of one histogram series."""

    __slots__ = ("count", "cum", "edges", "sum")

    def __init__(self, edges: np.ndarray) -> None:
        self.edges = edges
        self.cum = np.zeros(edges.size, dtype=np.int64)  # values <= each edge
        self.count = 0
        self.sum = 0.0

    def add(self, values: np.ndarray) -> None:
        """Count `values` (seconds). Sorting them and looking the edges up in them costs ~1/10 of looking each
        value up among the edges (31 500 ITL gaps: 25-160 us instead of 0.3-1.7 ms)."""
        if values.size:
            self.cum += np.searchsorted(np.sort(values), self.edges, side="right")
            self.count += int(values.size)
            self.sum += float(values.sum())

    def cumulative(self, le: list[str]) -> list[tuple[str, float]]:
        """Prometheus' (le, cumulative count) pairs, +Inf last."""
        return list(zip(le, [*self.cum.astype(float).tolist(), float(self.count)], strict=True))


def _columns(batch: Batch) -> Columns | None:
    """The batch's records as columns (the packed payload, else its JSON lines); None without records."""
    if not batch.n:
        return None
    if batch.cols:
        return _merge([_unpack(memoryview(batch.cols))])
    recs, _torn = parse_lines(io.StringIO(batch.records))
    return columns_from_records(recs) if recs else None


class Exporter:
    """The live figures of one run and their Prometheus families (registered in its own `registry`)."""

    def __init__(
        self,
        options: Options,
        env: Environment | None = None,
        target_rate: Callable[[], float | None] | None = None,
    ) -> None:
        self.env = env
        self.target_rate = target_rate or (lambda: options.load.request_rate)
        self.collector: Collector | None = None
        self.requests: dict[tuple[str, str, str], int] = {}  # (scenario, outcome, error) -> requests
        self.tokens: dict[tuple[str, str], int] = {}  # (direction, scenario) -> tokens of the successes
        self.good: dict[str, int] = {}
        self.hists: dict[tuple[str, str], _Hist] = {}  # (metric, scenario)
        self.cpu: dict[str, float] = {}  # worker -> latest CPU sample (fraction of one core)
        self.lag_s: dict[str, float] = {}  # worker -> the largest loop lag of its latest batch
        self.batches = 0
        self.bad_batches = 0
        self.finished = False
        self.started = time.time()
        self.configure(options)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)  # a collector by its collect() method
        ProcessCollector(registry=self.registry)  # the master's own CPU and memory (process_*)
        self.server: WSGIServer | None = None
        self.scrapes: list[float] = []
        self.gpu_tail: GpuTail | None = None  # --gpu-metrics' samples files, read at each scrape

    def configure(self, options: Options) -> None:
        """Take the run's options (the web UI's form may have changed --goodput): SLO and bucket edges."""
        if self.hists:  # samples are in: their buckets stay
            return
        self.options = options
        self.slo = Slo.parse([options.measure.goodput]) if options.measure.goodput else None
        self.edges = {m: np.asarray(e, dtype=np.float64) for m, e in buckets(self.slo).items()}
        self.le = {m: [floatToGoString(x) for x in e] + ["+Inf"] for m, e in self.edges.items()}
        self.fleet = FleetSeries(_Hist, self.edges, self.le)

    def attach(self, collector: Collector) -> None:
        """Follow this collector's ingest: every batch it takes in is counted here too."""
        self.collector = collector
        collector.on_ingest.append(self.on_batch)

    # ----- ingest -----
    def on_batch(self, batch: Batch) -> None:
        """One worker batch: its records into counters and histograms, its health into gauges."""
        self.batches += 1
        try:
            c = _columns(batch)
            if c is not None and c.n:
                self._observe(c)
        except Exception:  # the records are on disk; the live figures miss this batch (said once)
            self.bad_batches += 1
            if self.bad_batches == 1:
                log.exception(
                    "vllm-locust: a batch from %s could not be exported to Prometheus", batch.worker
                )
        health = batch.health
        worker = str(batch.worker)
        if health.get("cpu"):
            self.cpu[worker] = float(health["cpu"][-1])
        if health.get("lag_ms"):
            self.lag_s[worker] = max(health["lag_ms"]) / 1e3

    def _observe(self, c: Columns) -> None:
        codes, names = c.a["scenario"], c.tables["scenario"]
        err, kinds = c.a["error"], c.tables["error"]
        interrupted = c.code("error", "interrupted")
        if is_fleet(c):  # a fleet's records: per endpoint and replica too
            self.fleet.observe(c, sent_rows(c, np.arange(c.n, dtype=np.int64)))
        for k, name in enumerate(names):
            idx = np.arange(c.n, dtype=np.int64) if len(names) == 1 else np.flatnonzero(codes == k)
            if not idx.size:
                continue
            scen = name or ""
            sent = sent_rows(c, idx)
            self._count(scen, "dropped", "", idx.size - sent.size)
            if not sent.size:  # dropped arrivals only (their scenario is "-"): no latency or token series
                continue
            ok = ok_rows(c, sent)
            self._count(scen, "ok", "", ok.size)
            self._count(scen, "interrupted", "", int((err[sent] == interrupted).sum()))
            bad = np.ones(c.n, dtype=bool)
            bad[ok] = False
            failed = sent[bad[sent] & (err[sent] != interrupted)]
            for code, n in zip(*np.unique(err[failed], return_counts=True), strict=True):
                # no error but no output chunk either: failed like the result counts it (stream ended empty)
                self._count(scen, "failed", kinds[int(code)] or "no_output", int(n))
            for key, column in (("input", "prompt_tokens"), ("output", "output_tokens")):
                self.tokens[key, scen] = self.tokens.get((key, scen), 0) + int(or_zero(c.a[column][ok]).sum())
            if self.slo is not None:
                met = slo_met(c, ok, self.slo)
                good = int(np.logical_and.reduce([*met.values(), np.ones(ok.size, dtype=bool)]).sum())
                self.good[scen] = self.good.get(scen, 0) + good
            samples = metric_arrays(c, idx)
            for m in METRICS:
                h = self.hists.get((m, scen))
                if h is None:
                    h = self.hists[m, scen] = _Hist(self.edges[m])
                h.add(samples[m])

    def _count(self, scen: str, outcome: str, error: str, n: int) -> None:
        if n:
            key = (scen, outcome, error)
            self.requests[key] = self.requests.get(key, 0) + n

    def finish(self) -> None:
        """Every batch of the run is in (the result is being written)."""
        self.finished = True

    # ----- scrape -----
    def collect(self) -> Iterator[Metric]:
        """The metric families of a scrape."""
        req = CounterMetricFamily(
            PREFIX + "requests",
            "Requests by scenario and outcome (ok, failed, interrupted, dropped), failed ones by error kind",
            labels=["scenario", "outcome", "error"],
        )
        for labels, n in sorted(self.requests.items()):
            req.add_metric(list(labels), n)
        yield req
        for key, what in (("input", "Prompt tokens"), ("output", "Output tokens")):
            fam = CounterMetricFamily(
                f"{PREFIX}{key}_tokens", f"{what} of the successful requests", labels=["scenario"]
            )
            for (k, scen), n in sorted(self.tokens.items()):
                if k == key:
                    fam.add_metric([scen], n)
            yield fam
        if self.slo is not None:
            objectives = " ".join(f"{k}<={v:g}ms" for k, v in self.slo.limits_ms.items())
            fam = CounterMetricFamily(
                PREFIX + "good_requests",
                f"Successful requests within every --goodput SLO ({objectives})",
                labels=["scenario"],
            )
            for scen, n in sorted(self.good.items()):
                fam.add_metric([scen], n)
            yield fam
        for m in METRICS:
            hist = HistogramMetricFamily(
                f"{PREFIX}{m}_seconds",
                f"Client-measured {_DOC[m]}, seconds (successful requests)",
                labels=["scenario"],
            )
            for (metric, scen), h in sorted(self.hists.items()):
                if metric == m:
                    hist.add_metric([scen], h.cumulative(self.le[m]), h.sum)
            yield hist
        yield from self.fleet.collect(PREFIX)
        yield from self._gauges()

    def _gauges(self) -> Iterator[Metric]:
        def gauge(name: str, doc: str, value: float | None, **labels: str) -> GaugeMetricFamily:
            g = GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))
            if value is not None:
                g.add_metric(list(labels.values()), value)
            return g

        workers = list(self.collector.workers.values()) if self.collector is not None else []
        inflight = sum(int(w.totals.get("inflight", 0)) for w in workers if w.lost_at is None)
        yield gauge(
            "requests_in_flight", "Requests in flight over all workers (as of their latest batch)", inflight
        )
        rate = self.target_rate()
        yield gauge(
            "target_request_rate",
            "Open loop: the schedule's rate, requests/s (the web UI may change it)",
            rate if rate is not None and math.isfinite(rate) else None,
        )
        runner = self.env.runner if self.env is not None else None
        yield gauge(
            "users", "Users running (closed loop: the concurrency)", runner.user_count if runner else None
        )
        states = GaugeMetricFamily(
            PREFIX + "workers", "Workers by state (live, lost, finished)", labels=["state"]
        )
        for state in ("live", "lost", "finished"):
            states.add_metric([state], sum(1 for w in workers if _state(w) == state))
        yield states
        cpu = GaugeMetricFamily(
            PREFIX + "worker_cpu_ratio",
            "Each worker's CPU use, fraction of one core (latest "
            "sample; near 1: the client is the bottleneck)",
            labels=["worker"],
        )
        for w, v in sorted(self.cpu.items()):
            cpu.add_metric([w], v)
        yield cpu
        lag = GaugeMetricFamily(
            PREFIX + "worker_loop_lag_seconds",
            "Each worker's largest event-loop lag in its latest batch (adds to the latencies it measures)",
            labels=["worker"],
        )
        for w, v in sorted(self.lag_s.items()):
            lag.add_metric([w], v)
        yield lag
        batches = CounterMetricFamily(PREFIX + "batches", "Worker batches the master took in")
        batches.add_metric([], self.batches)
        yield batches
        o = self.options
        run = os.path.basename(os.path.normpath(o.handoff.results_dir)) if o.handoff.results_dir else ""
        yield gauge(
            "run_info",
            "The run: its directory name, model, endpoint and loop",
            1.0,
            run=run,
            model=o.server.model,
            endpoint=o.scenario.endpoint,
            loop="open" if o.open_loop else "closed",
        )
        yield from self._gpu_gauges()
        yield gauge("run_start_time_seconds", "When this master started, Unix time", self.started)
        yield gauge(
            "run_finished",
            "1 once every batch of the run is in (the result is written)",
            float(self.finished),
        )

    def _gpu_gauges(self) -> Iterator[Metric]:
        """--gpu-metrics' GPUs as of their latest scrape (the run's samples files): power, utilisation, energy."""
        o = self.options
        if not o.handoff.results_dir:
            return
        if self.gpu_tail is None:
            self.gpu_tail = GpuTail(o.handoff.results_dir)
        gpus = self.gpu_tail.poll()
        for name, doc, attr in (
            ("gpu_power_watts", "Each GPU's power draw, latest scrape of its exporter", "power_w"),
            ("gpu_utilization_percent", "Each GPU's utilisation, latest scrape of its exporter", "util_pct"),
            (
                "gpu_energy_joules",
                "Each GPU's energy since the run's first scrape (its counter's increase)",
                "energy_so_far_j",
            ),
        ):
            g = GaugeMetricFamily(PREFIX + name, doc, labels=["gpu"])
            for gpu, now in sorted(gpus.items()):
                v = getattr(now, attr)
                if v is not None:
                    g.add_metric([gpu], v)
            yield g

    # ----- HTTP -----
    def _app(self) -> Callable[..., Any]:
        metrics = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            if environ.get("PATH_INFO", "/") in ("/", "/metrics"):
                self.scrapes.append(time.time())
            return metrics(environ, start_response)

        return app

    def close(self) -> None:
        """Stop serving; when something has been scraping, first wait (bounded) for its next scrape."""
        if self.server is None:
            return
        if self.scrapes:
            final = time.time()
            seen = len(self.scrapes)
            gap = self.scrapes[-1] - self.scrapes[-2] if seen > 1 else final - self.scrapes[-1]
            deadline = final + min(LAST_SCRAPE_WAIT_MAX_S, 1.5 * gap + 1.0)
            while (
                len(self.scrapes) == seen and time.time() < deadline
            ):  # the server's greenlets answer meanwhile
                gevent.sleep(0.05)
            gevent.sleep(0.05)  # let the response of that scrape go out
        self.server.stop(timeout=1)
        self.server = None


def _state(w: Any) -> str:
    return "lost" if w.lost_at is not None else "finished" if w.final else "live"


def serve(
    env: Environment | None, options: Options, target_rate: Callable[[], float | None] | None = None
) -> Exporter | None:
    """With --prometheus-port: an Exporter serving /metrics on every interface at that port; else None (also when
    the port cannot be bound: one error line, the run goes on without it)."""
    port = options.prometheus.prometheus_port
    if not port:
        return None
    exp = Exporter(options, env, target_rate)
    server = WSGIServer(("", port), exp._app(), log=None)
    try:
        server.start()
    except (OSError, OverflowError) as e:
        log.error("vllm-locust: --prometheus-port %d: %s; no /metrics this run", port, e)
        return None
    exp.server = server
    log.info("vllm-locust: Prometheus metrics at http://%s:%d/metrics", socket.gethostname(), port)
    return exp
