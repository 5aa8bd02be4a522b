"""What the gate compares: each side's per-request samples, read from a run directory, a `--repeats` directory
or a saved baseline file (`vllm-locust gate --save-baseline FILE RUN`).

A run's samples are its measured window's sent requests (the result's own window: --warmup/--cooldown left
out), in start order: start and end (s from the first start), outcome, token counts, validity, the SLO
verdict when the run had --goodput, and the chunk times of each success (µs from its start). Every statistic
the gate tests is computed from these with the result's definitions (vllm_users.measure.metrics), so a rule's
baseline value is the result's figure.

A baseline file is a compressed numpy archive (no pickles): one JSON document (format, label, each run's
settings and result figures) and each run's columns. It keeps every sample, so a saved baseline is tested
exactly as the run directory it came from.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from orchestration.report.run_sets import is_repeats_dir, is_sweep_dir, repeat_dirs
from vllm_users import errors
from vllm_users.atomic import write_atomic
from vllm_users.measure import metric_keys as K
from vllm_users.measure.delivered import shortfall_text
from vllm_users.measure.metrics import Slo, ok_rows, rows, sent_rows, slo_met
from vllm_users.measure.records_store import load_columns
from vllm_users.measure.run_result import load_result
from vllm_users.measure.windows import parse_optional, split
from vllm_users.run_dir import META, PARQUET, RECORDS, has_records, read_json_or_none

__all__ = [
    "BASELINE_FORMAT",
    "SETTINGS",
    "RunSamples",
    "Side",
    "energy_figures",
    "load_side",
    "mismatches",
    "save_baseline",
]

BASELINE_FORMAT = "vllm-locust-gate-baseline"
BASELINE_VERSION = 1
# Settings that make two runs measure different things: the gate refuses to compare them (--allow-mismatch)
SETTINGS = (
    "model_id",
    "endpoint",
    "input_len",
    "output_len",
    "range_ratio",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "users",
    "user_classes",
    "ramp_up_strategy",
    "ramp_up_start_rps",
    "ramp_up_end_rps",
    "goodput",
    "warmup",
    "cooldown",
)
OK, FAILED, INTERRUPTED = 0, 1, 2  # a sent request's outcome, as compute_metrics counts it
COLUMNS = ("start", "end", "outcome", "out_tok", "in_tok", "cached", "valid", "good", "lens", "chunks")


@dataclass
class RunSamples:
    """One run's per-request samples (sent requests of the measured window, in start order)."""

    name: str
    settings: dict[str, Any]  # SETTINGS, from run_meta.json (the result's header where that is missing)
    figures: dict[str, float]  # the result's scalar figures (the fallback for metrics with no samples)
    start: np.ndarray  # float64 s from the first start
    end: np.ndarray  # float64 s from the first start
    outcome: np.ndarray  # int8 OK / FAILED / INTERRUPTED
    out_tok: np.ndarray  # int64 usage output tokens (-1: none reported)
    in_tok: np.ndarray  # int64 usage prompt tokens (-1)
    cached: np.ndarray  # int64 cached prompt tokens (-1: not reported)
    valid: np.ndarray  # int8 -1 not checked, 0 invalid, 1 valid
    good: np.ndarray  # int8 -1 no SLO, 0/1 met every objective of the run's --goodput
    lens: np.ndarray  # int64 chunks of each request (0 for anything but a success)
    chunks: np.ndarray  # int64 chunk times of the successes, µs from their start, flat
    warnings: list[str] = field(default_factory=list)
    not_delivered: str | None = None  # an open loop short of its offered rate (measure.delivered)

    @property
    def n(self) -> int:
        """Sent requests."""
        return int(self.start.size)

    @cached_property
    def ok(self) -> np.ndarray:
        """Row numbers of the successes."""
        return np.flatnonzero(self.outcome == OK)

    @cached_property
    def first_chunk(self) -> np.ndarray:
        """Offset of each request's first chunk in `chunks`."""
        return np.cumsum(self.lens) - self.lens

    @property
    def duration(self) -> float:
        """First start to last end (the result's duration)."""
        return max(float(self.end.max()) - float(self.start.min()), 1e-9) if self.n else 0.0

    @cached_property
    def concurrency(self) -> float:
        """Mean requests in flight (Little's law: total time in flight over the run's span)."""
        return float((self.end - self.start).sum()) / self.duration if self.n else 0.0

    def columns(self) -> dict[str, np.ndarray]:
        """The arrays a baseline file keeps."""
        return {c: getattr(self, c) for c in COLUMNS}


def energy_figures(result: dict[str, Any]) -> dict[str, float]:
    """--gpu-metrics' figures of the result's `energy` block (one value a run: tested over --repeats)."""
    block = result.get("energy") or {}
    return {
        k: float(v)
        for k in K.ENERGY_FIGURES
        if isinstance(v := block.get(k), int | float) and not isinstance(v, bool)
    }


def _settings(meta: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    header = {**(result.get("meta") or {}), **{k: v for k, v in result.items() if not isinstance(v, dict)}}
    return {k: meta.get(k, header.get(k)) for k in SETTINGS}


def from_run_dir(run_dir: str) -> RunSamples:
    """The samples of one run directory; ReportError when it has no request records."""
    if not has_records(run_dir):
        raise errors.ReportError(
            f"{run_dir}: no {PARQUET} (nor {RECORDS}): the gate tests per-request samples, and a run without records has none"
        )
    meta = read_json_or_none(run_dir, META) or {}
    res = load_result(run_dir)
    result = res.to_json() if res is not None else {}
    meta = meta or dict(result.get("meta") or {}, model_id=result.get("model_id"))
    c = load_columns(run_dir)
    # the result's measured window (build_metrics': windows over every row, then the sent ones)
    measured, _windows = split(
        c, rows(c), parse_optional(meta.get("warmup")), parse_optional(meta.get("cooldown"))
    )
    sent = sent_rows(c, measured)
    idx = sent[np.argsort(c.a["t_start"][sent], kind="stable")]
    t_start = c.a["t_start"][idx]
    t0 = float(np.nanmin(t_start)) if idx.size else 0.0
    ok = ok_rows(c, idx)
    outcome = np.full(idx.size, FAILED, dtype=np.int8)
    outcome[np.isin(idx, ok)] = OK
    outcome[c.a["error"][idx] == c.code("error", "interrupted")] = INTERRUPTED
    lens = np.where(outcome == OK, c.lens[idx], 0).astype(np.int64)
    # chunks of the successes in `idx`'s order: gather each request's slice
    starts = c.starts[idx][outcome == OK]
    ok_lens = lens[outcome == OK]
    gather = np.repeat(starts - (np.cumsum(ok_lens) - ok_lens), ok_lens) + np.arange(int(ok_lens.sum()))
    good = np.full(idx.size, -1, dtype=np.int8)
    if meta.get("goodput"):
        try:
            met = slo_met(c, idx[outcome == OK], Slo.parse([meta["goodput"]]))
            good[outcome == OK] = np.logical_and.reduce([*met.values(), np.ones(int(ok_lens.size), bool)])
        except ValueError:
            pass  # an unreadable --goodput: request_goodput has no samples, so rules on it are untested
    figures = {
        k: float(v) for k, v in result.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    figures.update(energy_figures(result))
    return RunSamples(
        name=os.path.basename(os.path.normpath(run_dir)),
        settings=_settings(meta, result),
        figures=figures,
        start=t_start - t0,
        end=t_start - t0 + c.a["end_us"][idx] / 1e6,
        outcome=outcome,
        out_tok=c.a["output_tokens"][idx].astype(np.int64),
        in_tok=c.a["prompt_tokens"][idx].astype(np.int64),
        cached=c.a["cached_tokens"][idx].astype(np.int64),
        valid=c.a["valid"][idx].astype(np.int8),
        good=good,
        lens=lens,
        chunks=c.chunks[gather].astype(np.int64),
        warnings=list(c.warnings),
        not_delivered=shortfall_text(result.get(K.DELIVERY)),
    )


@dataclass
class Side:
    """One side of a comparison: one run, or the repeats of one run (each with its samples)."""

    label: str  # the path it came from
    kind: str  # "run" | "repeats" | "baseline file"
    runs: list[RunSamples]
    origin: str = ""  # a baseline file: the directory it was saved from

    @property
    def repeated(self) -> bool:
        """True with two or more runs: their spread is the noise."""
        return len(self.runs) >= 2

    def describe(self) -> str:
        """'results/base (1 run, 200 requests)'."""
        n = sum(r.n for r in self.runs)
        what = f"{len(self.runs)} repeats" if self.repeated else "1 run"
        via = f"from {self.origin}, " if self.origin else ""
        return f"{self.label} ({via}{what}, {n} requests)"


def load_side(where: str) -> Side:
    """A run directory, a --repeats directory or a baseline file as a Side; UsageError/ReportError otherwise."""
    if os.path.isfile(where):
        return _load_baseline(where)
    if not os.path.isdir(where):
        raise errors.UsageError(f"{where}: no such run directory or baseline file")
    if is_sweep_dir(where):
        raise errors.UsageError(f"{where} is a sweep or an SLO search: gate one of its step directories")
    if is_repeats_dir(where):
        runs = [from_run_dir(d) for d in repeat_dirs(where)]
        if not runs:
            raise errors.ReportError(f"{where}: a repeats directory with no repeat")
        return Side(where, "repeats", runs)
    return Side(where, "run", [from_run_dir(where)])


def mismatches(a: Side, b: Side) -> dict[str, tuple[Any, Any]]:
    """Setting -> (baseline's, candidate's) for every setting in which the two sides' first runs differ (a
    setting one side does not know is no mismatch)."""
    out: dict[str, tuple[Any, Any]] = {}
    for k in SETTINGS:
        x, y = a.runs[0].settings.get(k), b.runs[0].settings.get(k)
        if x is not None and y is not None and _norm(x) != _norm(y):
            out[k] = (x, y)
    return out


def _norm(v: Any) -> Any:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, list | tuple):
        return tuple(sorted(map(str, v)))
    return v


# ------------------------------------------------------------------------------------- baseline files
def save_baseline(file: str, side: Side) -> None:
    """Write `side` as a baseline file (atomically: a CI job never keeps half a file)."""
    doc = {
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "origin": side.origin or side.label,
        "runs": [
            {"name": r.name, "settings": r.settings, "figures": r.figures, "not_delivered": r.not_delivered}
            for r in side.runs
        ],
    }
    arrays = {f"r{i}_{c}": a for i, r in enumerate(side.runs) for c, a in r.columns().items()}
    arrays["doc"] = np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
    write_atomic(file, buf.getvalue())


def _load_baseline(file: str) -> Side:
    try:
        with np.load(file, allow_pickle=False) as z:
            doc = json.loads(bytes(z["doc"]).decode())
            if doc.get("format") != BASELINE_FORMAT:
                raise ValueError("not a baseline")
            if int(doc.get("version", 0)) > BASELINE_VERSION:
                raise errors.UsageError(
                    f"{file}: a baseline file of a newer vllm-locust (version {doc['version']})"
                )
            runs = [
                RunSamples(
                    name=r["name"],
                    settings=r["settings"],
                    figures=r["figures"],
                    not_delivered=r.get("not_delivered"),
                    **{c: z[f"r{i}_{c}"] for c in COLUMNS},
                )
                for i, r in enumerate(doc["runs"])
            ]
    except (OSError, ValueError, KeyError) as e:
        if isinstance(e, errors.UsageError):
            raise
        raise errors.UsageError(
            f"{file}: not a run directory, a repeats directory or a baseline file written by "
            "`vllm-locust gate --save-baseline`"
        ) from None
    return Side(file, "baseline file", runs, origin=str(doc.get("origin") or ""))
