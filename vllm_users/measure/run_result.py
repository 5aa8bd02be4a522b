"""The run's result as one typed object: built once by the master, written once as result.json, read back here.

`RunResult.to_json()` is the result.json users get (vLLM bench serve's field names first, our extras beside them,
in a fixed order); `RunResult.from_json()` / `load_result(run_dir)` read one back, and to_json(from_json(d)) == d
(keys and order) for every result this project writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_users.atomic import atomic_json
from vllm_users.measure import metric_keys as K
from vllm_users.run_dir import RESULT

HEADER_FIELDS = (
    "date",
    "backend",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
)
RAMP_FIELDS = ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")  # only in a ramp's result
TOOL = "vllm-locust"
# what the master adds after the metrics (run health, exit code, server cross-check, --profile, --gpu-hour-price):
# written when set, in this order
RUN_FIELDS = (
    "client_health",
    "data_loss",
    "client_bound",
    "timeline",
    "exit_code",
    "server_served",
    "missing_vs_server",
    "profile",
    "cost",
    "replay",
    "sessions",
    "latency_breakdown",
    "energy",
)


@dataclass(frozen=True)
class RunResult:
    """One run's result: the header (vLLM's names), the overall metrics, per-scenario metrics and run health."""

    date: str | None
    backend: str | None
    model_id: str | None
    tokenizer_id: str | None
    num_prompts: int | None
    request_rate: float | str | None  # "inf": all at once (JSON has no infinity)
    burstiness: float | str | None
    max_concurrency: int | None
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    # vllm_users.measure.result_fields.compute_metrics of the measured window, in its order (vLLM's fields
    # duration, completed, ..., pN_ttft_ms, ... and our extras: errors_by_kind, arrivals, windows, ...)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    input_len_check: Mapping[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    per_scenario: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    classes: Mapping[str, Any] | None = None  # traffic classes: vllm_users.measure.per_class
    per_model: Mapping[str, Any] | None = None  # several served models: vllm_users.measure.per_model
    per_endpoint: Mapping[str, Any] | None = None  # several --host URLs: vllm_users.measure.per_endpoint
    per_replica: Mapping[str, Any] | None = None  # --replica-header: vllm_users.measure.per_endpoint
    ttft_by_turn: Mapping[str, Any] | None = None
    tool: str = TOOL
    meta: Mapping[str, Any] = field(default_factory=dict)
    client_health: Mapping[str, Any] | None = None
    data_loss: Mapping[str, Any] | None = None
    client_bound: bool | None = None
    timeline: list[dict[str, Any]] | None = None
    exit_code: int | None = None
    server_served: int | None = None  # the server's count: the simulator's, or its counter over the load
    missing_vs_server: int | None = None  # served in the load, less recorded: requests we lost
    profile: Mapping[str, Any] | None = None  # --profile: RUN/profile.json
    cost: Mapping[str, Any] | None = None  # --gpu-hour-price
    replay: Mapping[str, Any] | None = None  # --trace: the replay's fidelity (measure/replay_fidelity.py)
    sessions: Mapping[str, Any] | None = None  # session graphs' figures (measure/session_metrics.py)
    # where a TTFT goes: the server's histograms over the load beside the client's (measure/latency_breakdown.py)
    latency_breakdown: Mapping[str, Any] | None = None
    energy: Mapping[str, Any] | None = (
        None  # --gpu-metrics: the GPUs over the measured window (measure/energy.py)
    )

    def metric(self, name: str, default: Any = None) -> Any:
        """One overall metric by its result.json name (e.g. "output_throughput")."""
        return self.metrics.get(name, default)

    @property
    def completed(self) -> int:
        """Successful requests in the measured window."""
        return int(self.metrics.get(K.COMPLETED) or 0)

    @property
    def failed(self) -> int:
        """Failed requests in the measured window (interrupted ones not counted)."""
        return int(self.metrics.get(K.FAILED) or 0)

    @property
    def recorded(self) -> int:
        """Requests sent and recorded in the measured window: completed, failed and interrupted."""
        return self.completed + self.failed + int(self.metrics.get(K.INTERRUPTED) or 0)

    @property
    def dropped(self) -> int:
        """Open loop: scheduled requests never sent."""
        return int((self.metrics.get(K.ARRIVALS) or {}).get("dropped") or 0)

    def replace(self, **changes: Any) -> RunResult:
        """A copy with `changes` (field names) applied."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """result.json's object: keys in the order users and vLLM bench serve's tools know."""
        out: dict[str, Any] = {k: getattr(self, k) for k in HEADER_FIELDS}
        if self.ramp_up_strategy:
            out.update({k: getattr(self, k) for k in RAMP_FIELDS})
        out.update(self.metrics)
        if self.input_len_check is not None:
            out["input_len_check"] = dict(self.input_len_check)
        if self.warnings:
            out["warnings"] = list(self.warnings)
        out["per_scenario"] = dict(self.per_scenario)
        if self.classes is not None:
            out["classes"] = dict(self.classes)
        if self.per_model is not None:
            out["per_model"] = dict(self.per_model)
        if self.per_endpoint is not None:
            out["per_endpoint"] = dict(self.per_endpoint)
        if self.per_replica is not None:
            out["per_replica"] = dict(self.per_replica)
        if self.ttft_by_turn:
            out["ttft_by_turn"] = dict(self.ttft_by_turn)
        out["tool"] = self.tool
        out["meta"] = dict(self.meta)
        for k in RUN_FIELDS:
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunResult:
        """A result read back from result.json's object; keys it does not name are metrics (kept in order)."""
        named = {
            *HEADER_FIELDS,
            *RAMP_FIELDS,
            *RUN_FIELDS,
            "input_len_check",
            "warnings",
            "per_scenario",
            "classes",
            "per_model",
            "per_endpoint",
            "per_replica",
            "ttft_by_turn",
            "tool",
            "meta",
        }
        kw: dict[str, Any] = {k: doc.get(k) for k in HEADER_FIELDS}
        kw.update(
            {
                k: doc[k]
                for k in (
                    *RAMP_FIELDS,
                    *RUN_FIELDS,
                    "input_len_check",
                    "ttft_by_turn",
                    "classes",
                    "per_model",
                    "per_endpoint",
                    "per_replica",
                )
                if k in doc
            }
        )
        return cls(
            **kw,
            metrics={k: v for k, v in doc.items() if k not in named},
            warnings=tuple(doc.get("warnings") or ()),
            per_scenario=doc.get("per_scenario") or {},
            tool=doc.get("tool", TOOL),
            meta=doc.get("meta") or {},
        )


def result_path(run_dir: str) -> str:
    """Where a run directory keeps its result."""
    return os.path.join(run_dir, RESULT)


def load_result(run_dir: str) -> RunResult | None:
    """The result a run directory holds; None when it has none or it is unreadable (a killed master)."""
    try:
        with open(result_path(run_dir)) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return RunResult.from_json(doc) if isinstance(doc, dict) else None


def save_result(run_dir: str, res: RunResult) -> None:
    """Write result.json atomically (a reader never sees half of it). The master calls this once per run."""
    atomic_json(result_path(run_dir), res.to_json())
