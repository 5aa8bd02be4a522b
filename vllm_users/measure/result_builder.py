"""Assemble a run's result JSON (vLLM bench serve's field names, our extras beside them) from its records."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import Records, as_columns
from vllm_users.measure.delivered import shortfall_text
from vllm_users.measure.metrics import PercentileChoice, Slo, rows
from vllm_users.measure.per_class import class_table, per_class
from vllm_users.measure.per_endpoint import per_endpoint, per_replica
from vllm_users.measure.per_model import per_model
from vllm_users.measure.result_fields import build_metrics
from vllm_users.measure.run_result import RAMP_FIELDS, RunResult, save_result
from vllm_users.measure.windows import parse_optional, split


def build_run_result(
    records: Records,
    meta: dict[str, Any],
    *,
    slo: Slo | None = None,
    percentiles: PercentileChoice | None = None,
    warnings: Sequence[str] = (),
) -> RunResult:
    """The typed result of `records`: header fields, overall metrics, per-scenario metrics, input-length check.

    `records`: the run's columns (vllm_users.measure.columns) or a list of RequestRecords; `percentiles`:
    which pN fields (default: the run's --percentile-metrics/--metric-percentiles from `meta`); `warnings`:
    the record reader's, after the result's own.
    """
    pc = percentiles or PercentileChoice.from_meta(meta)
    records = as_columns(records)  # packed once: the metrics and the classes read the same columns
    overall, scenarios, turns, n_sent = build_metrics(
        records,
        slo=slo,
        percentiles=pc.percentiles,
        percentile_metrics=pc.metrics,
        warmup=parse_optional(meta.get("warmup")),
        cooldown=parse_optional(meta.get("cooldown")),
    )
    rate = meta.get("request_rate") or 0.0
    ramp = meta.get("ramp_up_strategy")
    header: dict[str, Any] = {
        "date": meta.get("date") or time.strftime("%Y%m%d-%H%M%S"),
        "backend": meta.get("backend", "openai-chat" if meta.get("endpoint", "chat") == "chat" else "openai"),
        "model_id": meta.get("model_id"),
        "tokenizer_id": meta.get("tokenizer_id") or meta.get("model_id"),
        "num_prompts": meta.get("num_prompts") or n_sent,
        "request_rate": "inf" if (not rate or math.isinf(rate)) else rate,
        "burstiness": _inf_as_text(meta.get("burstiness", 1.0)),
        "max_concurrency": meta.get("max_concurrency") or None,
    }
    if ramp:  # vllm bench serve's fields for a ramp
        header.update({k: meta.get(k) for k in RAMP_FIELDS})
    check = input_len_check(scenarios, meta)
    said: list[str] = []
    if check is not None and not check["ok"]:
        said.append(check["message"])
    if (overall.get(K.WINDOWS) or {}).get("warning"):
        said.append(overall[K.WINDOWS]["warning"])
    short = shortfall_text(overall.get(K.DELIVERY))
    if short:  # the load measured is not the one asked for: said in the summary, the result and the report
        said.append("Load " + short + ": the latencies are those of a lighter load than the one asked for")
    measured, _ = split(
        records, rows(records), parse_optional(meta.get("warmup")), parse_optional(meta.get("cooldown"))
    )
    classes = per_class(
        records, measured, class_table(meta), slo=slo, percentiles=pc.percentiles
    )  # traffic classes
    models = per_model(records, measured, meta, slo=slo, percentiles=pc.percentiles)  # a model mix, adapters
    endpoints = per_endpoint(
        records, measured, meta, slo=slo, percentiles=pc.percentiles
    )  # several --host URLs
    replicas = per_replica(records, measured, slo=slo, percentiles=pc.percentiles)  # --replica-header
    named = {*header, "input_len_check", "warnings", "per_scenario", "ttft_by_turn", "tool"}
    return RunResult(
        **header,
        metrics=overall,
        input_len_check=check,
        warnings=(*said, *warnings),
        per_scenario=scenarios,
        classes=classes,
        per_model=models,
        per_endpoint=endpoints,
        per_replica=replicas,
        ttft_by_turn=turns or None,
        meta={k: v for k, v in meta.items() if k not in named and k not in overall},
    )


def build_result(
    records: Records,
    meta: dict[str, Any],
    *,
    slo: Slo | None = None,
    percentiles: PercentileChoice | None = None,
) -> dict[str, Any]:
    """build_run_result as result.json's object (the report recomputes a run's result with it)."""
    return build_run_result(records, meta, slo=slo, percentiles=percentiles).to_json()


INPUT_LEN_TOLERANCE = 0.10  # actual mean prompt tokens this far off --input-len: the result says so loudly


def input_len_check(scenarios: dict[str, dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any] | None:
    """Requested versus actual prompt length of the plain `chat` scenario (random prompts whose length is
    --input-len; other scenarios add schemas, tools, history). Actual = mean usage.prompt_tokens less the
    tokens the server adds around a prompt (chat template, BOS) where calibration measured them."""
    s = scenarios.get("chat") or {}
    want, got = s.get(K.INPUT_LEN_REQUESTED_MEAN), s.get(K.INPUT_LEN_ACTUAL_MEAN)
    if not want or got is None:
        return None
    cal = meta.get("prompt_calibration") or {}
    overhead = cal.get("overhead_tokens")
    text = got - overhead if isinstance(overhead, int) else got
    off = (text - want) / want
    ok = abs(off) <= INPUT_LEN_TOLERANCE
    out: dict[str, Any] = {
        "requested_mean": want,
        "actual_mean": got,
        "server_overhead_tokens": overhead,
        "actual_text_mean": text,
        "off_fraction": off,
        "tolerance": INPUT_LEN_TOLERANCE,
        "calibration": cal.get("source"),
        "ok": ok,
    }
    if not ok:
        around = f" less {overhead} template/special tokens" if isinstance(overhead, int) else ""
        out["message"] = (
            f"PROMPT LENGTHS OFF: prompts averaged {text:.1f} tokens ({got:.1f} by usage.prompt_tokens{around}) "
            f"where --input-len asked {want:.1f} ({off:+.0%}; calibration: {cal.get('source') or 'unknown'}); "
            "latency figures are for these lengths, not the requested ones"
        )
    return out


def _inf_as_text(x: Any) -> Any:
    """JSON has no infinity: write it as "inf" (as vLLM's request_rate)."""
    return "inf" if isinstance(x, float) and math.isinf(x) else x


def result_from_dir(results_dir: str, meta: dict[str, Any]) -> RunResult:
    """The typed result of a run directory's records (records_store.load_columns: records.parquet, or an older
    run's file)."""
    from vllm_users.measure.records_store import load_columns  # pyarrow: loaded where records are read

    slo = Slo.parse([meta["goodput"]]) if meta.get("goodput") else None
    records = load_columns(results_dir)
    torn, warnings = records.torn_lines, list(records.warnings)
    if torn:
        warnings.append(f"{torn} torn or unparseable record line(s) skipped")
    return build_run_result(records, meta, slo=slo, warnings=warnings)


def write_result(
    results_dir: str, meta: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """result_from_dir with `extra` (RunResult fields: health, loss, ...) set, written atomically; its JSON."""
    res = result_from_dir(results_dir, meta).replace(**(extra or {}))
    save_result(results_dir, res)
    return res.to_json()
