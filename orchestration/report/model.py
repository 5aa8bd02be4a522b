"""The report as data: runs, comparison, findings and the rows every format shows (one place for labels)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestration.report.compare import compare
from orchestration.report.diagnose import Finding, diagnose
from orchestration.report.findings import FindingGroup, group_findings, problems
from orchestration.report.postprocess import RunData
from vllm_users.measure import metric_keys as K
from vllm_users.measure.server_counters import range_text

# (result key, label, format) of the summary table, from the metrics' declaration (metric_keys); the
# HTML/Markdown/PDF tables all use these lists. Between the head and the tail: each latency metric's mean, median
# and the runs' percentile fields.
_HEAD, _TAIL = K.rows()
SUMMARY_ROWS: tuple[tuple[str, str, str], ...] = tuple((k.name, k.label or k.name, k.fmt) for k in _HEAD)
SUMMARY_TAIL_ROWS: tuple[tuple[str, str, str], ...] = tuple((k.name, k.label or k.name, k.fmt) for k in _TAIL)


def fmt(value: Any, spec: str) -> str:
    """Format a value for a table; 'n/a' for missing values."""
    if value is None or isinstance(value, str) and spec != "s":
        return "n/a" if value is None else str(value)
    try:
        if spec == "d":
            return str(int(value))
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


@dataclass
class Report:
    """Everything a renderer needs."""

    runs: list[RunData]
    findings: list[Finding]
    comparison: dict[str, Any] | None
    failed_inputs: list[str] = field(default_factory=list)  # "dir: reason" for runs that could not be read
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))

    def finding_groups(self) -> list[FindingGroup]:
        """The findings, each said once with the runs it applies to."""
        return group_findings(self.findings)

    def headline(self) -> list[tuple[str, str, str]]:
        """(run, the load applied, the verdict) per run: what the report leads with."""
        out = []
        for r in self.runs:
            mine = problems([f for f in self.findings if f.run == r.name])
            if mine:
                worst = "critical" if any(f.severity == "critical" for f in mine) else "warning"
                word = f"{len(mine)} problem{'s' if len(mine) > 1 else ''} ({worst}): " + "; ".join(
                    f.title for f in mine
                )
            else:
                word = "no problem found"
            out.append((r.name, applied_load(r.result), word))
        return out

    def summary_rows(self) -> list[tuple[str, str, list[str]]]:
        """(key, label, formatted value per run) for rows that at least one run has."""
        rows = []
        for key, label, spec in (*SUMMARY_ROWS, *self.latency_rows(), *SUMMARY_TAIL_ROWS):
            vals = [r.result.get(key) for r in self.runs]
            if any(v is not None for v in vals):
                rows.append((key, label, [fmt(v, spec) for v in vals]))
        return rows

    def latency_rows(self) -> list[tuple[str, str, str]]:
        """Mean, median and every percentile field (vLLM's `p99.9_ttft_ms`) that a run has, per metric."""
        out = []
        for m in K.ROW_LATENCIES:
            out += [(m.key(s), m.stat_label(s, upper=True), m.fmt) for s in ("mean", "median")]
            keys: dict[str, str] = {}
            for r in self.runs:
                keys.update(dict(K.percentile_keys(r.result, m.name)))
            for key in sorted(keys, key=lambda k: float(keys[k])):
                out.append((key, m.stat_label(f"p{keys[key]}", upper=True), m.fmt))
        return out

    def server_rows(self) -> list[tuple[str, str, list[str]]]:
        """Server-side figures next to the client's (the difference is network + client overhead)."""
        spec: list[tuple[str, str, Any]] = [
            (
                "server_prefix_cache_hit_rate",
                "Prefix cache hit rate (server)",
                lambda s, r: _pct(s.get("prefix_cache_hit_rate")),
            ),
            (
                "server_kv_cache_usage_peak",
                "KV cache usage peak",
                lambda s, r: _pct(s.get("kv_cache_usage_peak")),
            ),
            ("server_running_max", "Running requests max / mean", lambda s, r: _pair(s, "running")),
            ("server_waiting_max", "Waiting requests max / mean", lambda s, r: _pair(s, "waiting")),
            (
                "server_ttft",
                "TTFT server p50 / p99 (ms, the buckets they fall in)",
                lambda s, r: _hist(s, "ttft_ms"),
            ),
            (
                "client_ttft",
                "TTFT client p50 / p99 (ms)",
                lambda s, r: f"{fmt(r.get(K.TTFT.key('median')), '.2f')} / {fmt(r.get(K.TTFT.p(99)), '.2f')}",
            ),
            (
                "ttft_overhead",
                "Client - server TTFT mean (ms)",
                lambda s, r: fmt((s.get("vs_client") or {}).get("ttft_mean_diff_ms"), ".2f"),
            ),
            (
                "server_queue_time",
                "Queue time server p50 / p99 (ms, the buckets they fall in)",
                lambda s, r: _hist(s, "queue_time_ms"),
            ),
            (
                "server_generation_tokens",
                "Generated tokens server / client",
                lambda s, r: (
                    f"{fmt(s.get('generation_tokens'), '.0f')} / {fmt(r.get(K.TOTAL_OUTPUT_TOKENS), 'd')}"
                ),
            ),
            (
                "server_gpu_util",
                "GPU utilisation mean (DCGM)",
                lambda s, r: fmt(s.get("gpu_util_mean"), ".0f"),
            ),
        ]
        if not any((r.result.get("server_metrics") or {}).get("available") for r in self.runs):
            return []
        rows = []
        for key, label, f in spec:
            vals = [f(r.result.get("server_metrics") or {}, r.result) for r in self.runs]
            if any(v not in ("n/a", "n/a / n/a") for v in vals):
                rows.append((key, label, vals))
        return rows

    def to_json(self) -> dict[str, Any]:
        """The JSON format: results, comparison and diagnosis."""
        return {
            "tool": "vllm-locust report",
            "created": self.created,
            "runs": [
                {
                    "name": r.name,
                    "run_dir": r.run_dir,
                    "source": r.source,
                    "approximate_fields": r.approximate,
                    "warnings": r.warnings,
                    "result": r.result,
                }
                for r in self.runs
            ],
            "comparison": self.comparison,
            "diagnosis": [f.to_dict() for f in self.findings],
            "failed_inputs": self.failed_inputs,
        }


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def applied_load(res: dict[str, Any]) -> str:
    """What was run, in one line: model and endpoint, scenarios, the load, its length and the prompt lengths."""
    meta = res.get("meta") or {}

    def get(k: str) -> Any:
        return res.get(k) if res.get(k) is not None else meta.get(k)

    parts = [f"model {get('model_id') or '?'}", f"endpoint {get('endpoint') or '?'}"]
    if res.get("per_scenario"):
        parts.append("scenarios " + ", ".join(sorted(res["per_scenario"])))
    replay = res.get("replay") or {}
    if replay:
        parts.append(f"trace {replay.get('format')} at time scale {fmt(replay.get('time_scale'), 'g')}")
    elif _finite(get("request_rate")):  # vLLM's result says inf for a closed loop
        rate = f"open loop at {fmt(get('request_rate'), 'g')} req/s"
        burst = get("burstiness")
        parts.append(rate + (f" (burstiness {fmt(burst, 'g')})" if burst not in (None, 1, 1.0) else ""))
    elif get("ramp_up_strategy"):
        parts.append(
            f"{get('ramp_up_strategy')} ramp {fmt(get('ramp_up_start_rps'), 'g')} -> "
            f"{fmt(get('ramp_up_end_rps'), 'g')} req/s"
        )
    elif get("users") is not None:
        parts.append(f"{get('users')} users (closed loop)")
    if get("max_concurrency"):
        parts.append(f"max concurrency {get('max_concurrency')}")
    if get("num_prompts"):
        parts.append(f"{get('num_prompts')} prompts")
    if get("run_time"):
        parts.append(f"run time {get('run_time')}")
    if not replay and get("input_len") is not None:
        lengths = f"input {get('input_len')} / output {get('output_len')} tokens"
        rr = get("range_ratio")
        parts.append(lengths + (f" (range ratio {fmt(rr, 'g')})" if rr else ""))
    if get("prefix_len"):
        parts.append(
            f"shared prefix {get('prefix_len')} tokens on {fmt(get('cache_rate'), '.0%')} of prompts"
        )
    return ", ".join(parts)


def _pct(v: Any) -> str:
    return fmt(v, ".1%")


def _pair(s: dict[str, Any], key: str) -> str:
    return f"{fmt(s.get(key + '_max'), '.0f')} / {fmt(s.get(key + '_mean'), '.1f')}"


def _hist(s: dict[str, Any], key: str) -> str:
    """A server histogram's p50 / p99 cell: the buckets they fall in ("5-10 / 25-50"), never an interpolated point."""
    h = s.get(key) or {}
    if not h.get("p50_range"):
        return "n/a / n/a"
    return f"{range_text(h.get('p50_range'))} / {range_text(h.get('p99_range'))}"


def build_report(runs: Sequence[RunData], failed_inputs: Sequence[str] = ()) -> Report:
    """Diagnose and compare loaded runs."""
    comparison = compare(runs) if len(runs) > 1 else None
    return Report(list(runs), diagnose(runs, comparison), comparison, list(failed_inputs))
