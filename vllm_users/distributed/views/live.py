"""The live view of a run (master side): what the web UI's LLM tab shows, every ~2 s.

Everything comes from what the master already has: the workers' live totals, the merged HdrHistograms
(exact to 3 significant digits, not Locust's rounded response times), the workers' health samples, and
the tail of server_metrics.jsonl when the run scrapes the server. A run with traffic classes also
gets per-class rows (`classes`): the workers' per-class counts and histograms, judged as per_class.py judges
the result (each class against its own SLO, Jain's index of goodput / weight over the classes). A run with two or
more endpoints (several --host URLs) or replicas (--replica-header) gets per-endpoint / per-replica rows
(`endpoints`, `replicas`): counts, the last interval's output tok/s, TTFT p50/p99 and TPOT p50 from the merged
histograms; once the run has ended, result.json's `per_endpoint` / `per_replica` figures.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import asdict
from typing import Any

import numpy as np

from vllm_users import run_dir
from vllm_users.distributed.transport.live_totals import GROUPINGS
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.views.gpu_tail import GpuTail, gpu_row, new_samples
from vllm_users.measure import client_verdict as cv
from vllm_users.measure import metric_keys as K
from vllm_users.measure.health import summarize
from vllm_users.measure.histograms import HIST_METRICS, HistogramSet, percentiles_ms
from vllm_users.measure.metric_keys import percentile_name
from vllm_users.measure.metrics import Slo
from vllm_users.measure.per_class import CLASS_METRICS, CLASS_PERCENTILES, class_slo, jain_index
from vllm_users.measure.run_result import RunResult
from vllm_users.measure.server_metric_names import KV_USAGE, PREFIX_HITS, PREFIX_QUERIES, RUNNING, WAITING
from vllm_users.options import Options

HISTORY_POINTS = 1800  # one hour of 2-s points
SERIES = ("t", "output_tok_s", "req_s", "ttft_p50_ms", "ttft_p99_ms", "inflight", "server_queue")
ALL = "all"  # the row that adds every scenario's histograms


class ServerTail:
    """Reads server_metrics.jsonl as the run's sampler appends it: first and latest good sample."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.first: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None

    def poll(self) -> dict[str, Any] | None:
        """KV-cache use, running/waiting requests and the prefix-cache hit rate so far; None without samples."""
        rows, self.offset = new_samples(self.path, self.offset)
        for row in rows:
            self.first = self.first or row
            self.last = row
        return None if self.last is None else self._figures()

    def _figures(self) -> dict[str, Any]:
        assert self.first is not None and self.last is not None
        v, v0 = self.last["v"], self.first["v"]

        def first_of(names: tuple[str, ...]) -> float | None:
            return next((float(v[n]) for n in names if n in v), None)

        out: dict[str, Any] = {
            "age_s": round(time.time() - self.last["t"], 1),
            "running": v.get(RUNNING),
            "waiting": v.get(WAITING),
            "kv_cache_usage": first_of(KV_USAGE),
            "prefix_cache_hit_rate": None,
        }
        hits = next((n for n in PREFIX_HITS if n in v), None)
        queries = next((n for n in PREFIX_QUERIES if n in v), None)
        if hits and queries:
            dq = v[queries] - v0.get(queries, 0.0)
            out["prefix_cache_hit_rate"] = (v[hits] - v0.get(hits, 0.0)) / dq if dq > 0 else None
        return out


class LiveView:
    """Snapshots of a running test for the web UI, their history (charts) and the run's timeline."""

    def __init__(
        self, collector: Collector, options: Options, results_dir: str, timeline: list[dict[str, Any]]
    ) -> None:
        self.collector = collector
        self.options = options
        self.results_dir = results_dir
        self.timeline = timeline  # the master's (marks of starts, user and rate changes, stop)
        self.series: dict[str, deque[float | None]] = {k: deque(maxlen=HISTORY_POINTS) for k in SERIES}
        self.last: dict[str, Any] | None = None
        self.open_loop = options.open_loop
        self.target_rate: float | None = options.load.request_rate
        self.server = ServerTail(run_dir.path(results_dir, run_dir.SERVER_METRICS))
        self.gpu = GpuTail(results_dir)  # --gpu-metrics' samples, when the run scrapes GPU exporters
        self._prev: tuple[float, float, float, float, float] | None = None
        self.class_table: list[dict[str, Any]] = [asdict(c) for c in options.classes.vllm_classes]
        self.slo = Slo.parse([options.measure.goodput]) if options.measure.goodput else None
        # per grouping and group: output tokens at the last snapshot (its tok/s over the interval)
        self._group_tokens: dict[str, dict[str, int]] = {}

    def update(
        self, state: str = "", finished: bool = False, result: RunResult | None = None
    ) -> dict[str, Any]:
        """Take a snapshot now (the master calls this every ~2 s) and extend the chart series. While the run goes,
        the rates are the last interval's (`rates_over`: "interval"); once it has ended, `result` (the RunResult
        written as result.json) gives the rates, so the tab and result.json say one number."""
        c = self.collector
        now = time.time()
        tot = _totals(c)
        prev = self._prev or (c.started, 0.0, 0.0, 0.0, 0.0)
        dt = max(now - prev[0], 1e-6)
        span = max(now - c.started, 1e-6)
        running = {  # the chart's points are these, at the end too
            "req_s": (tot["ok"] - prev[1]) / dt,
            "failed_s": (tot["failed"] - prev[2]) / dt,
            "output_tok_s": (tot["output_tokens"] - prev[3]) / dt,
            "sent_s": (tot["sent"] - prev[4]) / dt,
        }
        final = (
            final_figures(result, self.options.measure.goodput) if finished and result is not None else None
        )
        rates: dict[str, float | None] = dict(running)
        if finished:  # result.json's rates over its benchmark duration; none where no result was written
            rates = dict.fromkeys(running) if final is None else dict(final["rates"])
        self._prev = (now, tot["ok"], tot["failed"], tot["output_tokens"], tot["sent"])
        window = c.window.merged().get("ttft")
        c.window.reset()
        win_ttft = percentiles_ms(window, (50, 99)) if window is not None else None
        server = self.server.poll()
        snap: dict[str, Any] = {
            "t": now,
            "elapsed_s": round(now - c.started, 1),
            "state": state,
            "finished": finished,
            "results_dir": self.results_dir,
            "totals": tot,
            # result.json's rates unrounded: a reader of this JSON compares them with result.json's
            "rates": rates if finished else {k: None if v is None else round(v, 2) for k, v in rates.items()},
            "rates_over": "result" if finished else "interval",
            "final": final,  # result.json's figures once the run has ended (None before, or without a result)
            "latency": (lat := latency_table(c)),
            "ttfa": ttfa_rows(lat) or None,  # reasoning runs only: time to the first answer token
            K.GOODPUT: final[K.GOODPUT] if final is not None and final[K.GOODPUT] else self._goodput(tot),
            "errors": tot.pop("errors"),
            "classes": self._classes(tot.pop("classes"), span if finished else dt, span, finished),
            **{k: self._fleet(k, tot.pop(k), span if finished else dt, finished) for k in FLEET},
            "workers": workers(c, now),
            K.ARRIVALS: self._arrivals(tot, rates) if self.open_loop else None,
            "server": server,
            "gpu": gpu_row(self.gpu, tot.get("output_tokens")),
            "timeline": self.timeline,
        }
        queue = None
        if server and server.get("running") is not None:
            queue = float(server["running"]) + float(server.get("waiting") or 0.0)
        if final is not None and result is not None and result.classes:  # the result's rows, as result.json
            snap["classes"] = {**result.classes, "order": list(result.classes.get("per_class") or {})}
        if final is not None and result is not None:  # result.json's per-endpoint/replica rows, or none
            for key, block in (("endpoints", result.per_endpoint), ("replicas", result.per_replica)):
                snap[key] = result_fleet(block)
        point = {
            "t": round(now, 3),
            "output_tok_s": running["output_tok_s"],
            "req_s": running["req_s"],
            "ttft_p50_ms": win_ttft["p50"] if win_ttft else None,
            "ttft_p99_ms": win_ttft["p99"] if win_ttft else None,
            "inflight": tot["inflight"],
            "server_queue": queue,
        }
        for k in SERIES:
            self.series[k].append(point[k])
        snap["series"] = {k: list(v) for k, v in self.series.items()}
        self.last = snap
        return snap

    def _goodput(self, tot: dict[str, Any]) -> dict[str, Any] | None:
        slo = self.options.measure.goodput
        if not slo:
            return None
        elapsed = max(time.time() - self.collector.started, 1e-6)
        done = tot["ok"] + tot["failed"]
        return {
            "slo": slo,
            "good": tot["good"],
            "good_fraction": tot["good"] / done if done else None,
            "good_req_s": round(tot["good"] / elapsed, 2),
        }

    def _tok_s(
        self, grouping: str, counts: dict[str, dict[str, int]], dt: float, finished: bool
    ) -> dict[str, float]:
        """Each group's output tok/s over `dt`: since the last snapshot, or over the run once finished."""
        prev = {} if finished else self._group_tokens.get(grouping, {})
        tok_s = {n: (v.get("output_tokens", 0) - prev.get(n, 0)) / dt for n, v in counts.items()}
        self._group_tokens[grouping] = {n: v.get("output_tokens", 0) for n, v in counts.items()}
        return tok_s

    def _classes(
        self, counts: dict[str, dict[str, int]], dt: float, span: float, finished: bool
    ) -> dict[str, Any] | None:
        """The per-class rows (None: the run has no classes); tok/s per 2 s, or over the run once finished."""
        tok_s = self._tok_s("classes", counts, dt, finished)
        return class_block(self.class_table, counts, self.collector.class_hists, span, tok_s, self.slo)

    def _fleet(
        self, grouping: str, counts: dict[str, dict[str, int]], dt: float, finished: bool
    ) -> dict[str, Any] | None:
        """The per-endpoint or per-replica rows (None: fewer than two); tok/s per 2 s, or over the run."""
        if len(counts) < 2:
            return None
        tok_s = self._tok_s(grouping, counts, dt, finished)
        hists = self.collector.group_hists.get(grouping) or HistogramSet()
        return fleet_block(counts, hists, tok_s, "run" if finished else "interval")

    def _arrivals(self, tot: dict[str, Any], rates: dict[str, float | None]) -> dict[str, Any]:
        sent_s = rates["sent_s"]
        return {
            "target_rate": self.target_rate,
            "achieved_rate": None if sent_s is None else round(sent_s, 2),
            "sent": tot["sent"],
            "late": tot["late"],
            "dropped": tot["dropped"],
            "backlog": tot["backlog"],
        }


def final_figures(res: RunResult, slo: str | None = None) -> dict[str, Any]:
    """The ended run's figures as result.json has them: its rates (completed, failed and recorded requests and
    output tokens of the measured window, over its benchmark duration), counts and goodput; None for a rate
    where no request was recorded (there is no duration to divide by)."""
    m = res.metrics
    duration = m.get(K.DURATION) if res.recorded else None

    def per_s(n: int) -> float | None:
        return n / duration if duration else None

    windows = m.get(K.WINDOWS) or {}
    good = m.get(K.GOODPUT) or {}
    return {
        "source": run_dir.RESULT,
        "duration_s": duration,
        K.COMPLETED: res.completed,
        K.FAILED: res.failed,
        "output_tokens": m.get(K.TOTAL_OUTPUT_TOKENS),
        "left_out": sum(int((windows.get(k) or {}).get("requests") or 0) for k in ("warmup", "cooldown")),
        "rates": {
            "req_s": m.get(K.REQUEST_THROUGHPUT) if res.completed else None,
            "failed_s": per_s(res.failed),
            "output_tok_s": m.get(K.OUTPUT_THROUGHPUT) if res.completed else None,
            "sent_s": per_s(res.recorded),
        },
        K.GOODPUT: {
            "slo": slo,
            "good": good.get("good"),
            "good_fraction": good.get("good_fraction") if res.completed else None,
            "good_req_s": m.get(K.REQUEST_GOODPUT),
        }
        if m.get(K.REQUEST_GOODPUT) is not None
        else None,
    }


def _totals(c: Collector) -> dict[str, Any]:
    """Every worker's live totals added up (error kinds merged)."""
    tot: dict[str, Any] = {
        k: 0
        for k in ("ok", "failed", "output_tokens", "inflight", "good", "sent", "late", "dropped", "backlog")
    }
    errors: dict[str, int] = {}
    groups: dict[str, dict[str, dict[str, int]]] = {g: {} for g in GROUPINGS}
    for w in c.workers.values():
        for k in tot:
            tot[k] += w.totals.get(k, 0)
        for kind, n in (w.totals.get("errors") or {}).items():
            errors[kind] = errors.get(kind, 0) + n
        for (
            grouping,
            merged,
        ) in groups.items():  # only the groupings the run has (classes, endpoints, replicas)
            for name, counts in (w.totals.get(grouping) or {}).items():
                mine = merged.setdefault(name, {})
                for k, n in counts.items():
                    mine[k] = mine.get(k, 0) + n
    tot["errors"] = dict(sorted(errors.items(), key=lambda kv: -kv[1]))
    tot.update(groups)
    return tot


FLEET = ("endpoints", "replicas")  # groupings shown only with two or more groups
FLEET_PERCENTILES = {"ttft": (50.0, 99.0), "tpot": (50.0,)}


def fleet_block(
    counts: dict[str, dict[str, int]], hists: HistogramSet, tok_s: dict[str, float], over: str
) -> dict[str, Any] | None:
    """Per endpoint or replica (sorted by name): requests, completed, failed, output tokens and tok/s, TTFT p50/p99
    and TPOT p50 in ms (absent without successes), with the keys result.json's per_endpoint uses; None with
    fewer than two groups."""
    if len(counts) < 2:
        return None
    merged = hists.hists
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(counts):
        n = counts[name]
        row: dict[str, Any] = {
            k: int(n.get(k, 0)) for k in ("requests", K.COMPLETED, K.FAILED, "output_tokens")
        }
        row[K.OUTPUT_THROUGHPUT] = round(tok_s.get(name, 0.0), 2)
        for metric, ps in FLEET_PERCENTILES.items() if row[K.COMPLETED] else ():
            h = merged.get((name, metric))
            if h is not None and h.get_total_count():
                pct = percentiles_ms(h, ps)
                row.update({f"{percentile_name(p)}_{metric}_ms": pct[f"p{int(p)}"] for p in ps})
        out[name] = row
    return {"groups": out, "order": list(out), "over": over}


def result_fleet(block: Any) -> dict[str, Any] | None:
    """result.json's per_endpoint or per_replica block as the tab's rows (None: the result has none)."""
    if not block:
        return None
    groups = dict(block.get("groups") or {})
    out = {"groups": groups, "order": list(groups), "over": "result", "imbalance": block.get("imbalance")}
    if "unnamed" in block:
        out["unnamed"] = block["unnamed"]
    return out


COUNTS = ("requests", K.COMPLETED, K.FAILED, "output_tokens", "good")


def class_block(
    table: list[dict[str, Any]],
    counts: dict[str, dict[str, int]],
    hists: HistogramSet,
    elapsed: float,
    tok_s: dict[str, float],
    slo: Slo | None,
) -> dict[str, Any] | None:
    """Per class (the --class table's order, then classes seen only in records, e.g. a trace's tenants): counts,
    tok/s, TTFT/TPOT/E2EL p50/p90/p99 (absent without successes), goodput against the class's own SLO, token
    share against weight share; and Jain's index of goodput / weight, as per_class.py reports them at the end.
    None when the run has no classes."""
    specs = {str(t["name"]): t for t in table}
    for name in sorted(n for n in counts if n not in specs):
        specs[name] = {"name": name, "weight": None}
    if not specs:
        return None
    weights = {n: float(s.get("weight") or 1.0) for n, s in specs.items()}
    wsum = sum(weights.values())
    total_out = max(sum(v.get("output_tokens", 0) for v in counts.values()), 1)
    merged = hists.hists
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        n = {k: int((counts.get(name) or {}).get(k, 0)) for k in COUNTS}
        cslo = class_slo(spec, slo)
        entry: dict[str, Any] = {
            "weight": spec.get("weight"),
            "weight_share": weights[name] / wsum,
            **n,
            K.OUTPUT_THROUGHPUT: round(tok_s.get(name, 0.0), 2),
            "output_token_share": n["output_tokens"] / total_out,
            "slo_ms": dict(cslo.limits_ms) if cslo is not None else {},
            "good_fraction": n["good"] / n[K.COMPLETED] if n[K.COMPLETED] else None,
            K.REQUEST_GOODPUT: n["good"] / elapsed,
        }
        for m in CLASS_METRICS if n[K.COMPLETED] else ():  # latency only where the class has successes
            h = merged.get((name, m))
            if h is not None and h.get_total_count():
                pct = percentiles_ms(h, CLASS_PERCENTILES)
                entry.update({f"{percentile_name(p)}_{m}_ms": pct[f"p{int(p)}"] for p in CLASS_PERCENTILES})
        out[name] = entry
    x = [out[n][K.REQUEST_GOODPUT] / weights[n] for n in out]
    fairness = {
        "jain_index": jain_index(x),
        "of": "request_goodput / weight",
        "values": dict(zip(out, x, strict=True)),
    }
    return {
        "per_class": out,
        "order": list(out),
        "fairness": fairness,
    }  # order: JSON objects come sorted by key


def latency_table(c: Collector) -> dict[str, dict[str, dict[str, float]]]:
    """scenario (and "all") -> metric -> count, mean, p50, p90, p99 in ms, from the merged histograms."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (scen, metric), h in sorted(c.hists.hists.items()):
        if h.get_total_count():
            out.setdefault(scen, {})[metric] = percentiles_ms(h)
    if len(out) > 1:
        out[ALL] = {m: percentiles_ms(h) for m, h in c.hists.merged().items()}
    elif out:
        out[ALL] = next(iter(out.values()))
    return out


def table_rows(latency: dict[str, dict[str, dict[str, float]]]) -> list[dict[str, Any]]:
    """Rows for Locust's extended table: one per scenario (then all), p50/p90/p99 of each metric."""
    rows = []
    for scen, metrics in latency.items():
        row: dict[str, Any] = {"name": scen, "requests": int(metrics.get("e2el", {}).get("count", 0))}
        for m in HIST_METRICS:
            for p in ("p50", "p90", "p99"):
                v = metrics.get(m, {}).get(p)
                row[f"{m}_{p}"] = "" if v is None else f"{v:.2f}"
        rows.append(row)
    return rows


def ttfa_rows(latency: dict[str, dict[str, dict[str, float]]]) -> list[dict[str, Any]]:
    """The LLM tab's TTFA rows: per scenario (then all) whose requests streamed reasoning before the answer,
    TTFT p50 beside TTFA's p50/p90/p99 (ms) and how many answers came; [] when none did."""
    rows = []
    for scen, metrics in latency.items():
        a = metrics.get("ttfa")
        if a:
            ttft = metrics.get("ttft", {}).get("p50")
            rows.append(
                {
                    "name": scen,
                    "answers": int(a.get("count", 0)),
                    "ttft_p50": ttft,
                    **{f"ttfa_{p}": a.get(p) for p in ("p50", "p90", "p99")},
                }
            )
    return rows


def workers(c: Collector, now: float) -> list[dict[str, Any]]:
    """Per worker: CPU and loop lag now (last samples), its verdict so far in the summary's words (client_verdict:
    our CPU, our code, the machine, too short to judge), records, state."""
    verdict = summarize(c.health)["workers"]
    out = []
    for name, w in sorted(c.workers.items()):
        h = c.health.get(name, {"cpu": [], "lag_ms": []})
        cpu, lag = h["cpu"][-5:], h["lag_ms"][-200:]  # ~5 s and ~10 s of samples
        state = "lost" if w.lost_at is not None else ("finished" if w.final else "live")
        out.append(
            {
                "name": name,
                "state": state,
                "records": w.records,
                "cpu": round(float(np.mean(cpu)), 3) if cpu else None,
                "loop_lag_p99_ms": round(float(np.percentile(lag, 99)), 2) if lag else None,
                "client_bound": verdict.get(name, {}).get("client_bound"),  # None: not judged yet
                "verdict": verdict.get(name, {}).get("verdict"),
                "verdict_text": cv.TEXT[verdict[name]["verdict"]] if name in verdict else cv.NOT_MEASURED,
                "last_batch_s": round(now - w.last_batch, 1) if w.last_batch else None,
            }
        )
    return out


def finite(x: Any) -> Any:
    """JSON-safe: NaN and infinities become None (JSON has no NaN)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x
