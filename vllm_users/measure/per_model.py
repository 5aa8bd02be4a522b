"""Per-model results (a model mix or classes that send to LoRA adapters: one server, several served names): each
model's requests, throughput, TTFT/TPOT/ITL/E2EL statistics and, with --goodput, its goodput; so a slow adapter
shows without a --class per model.

The models are those the run sent to: `--model`'s mix (meta `model_id`, e.g. `base:3,lora-a:1`), the classes'
`model=`, and any seen in the records. A record's `model` is None when it went to the run's one model (the mix's
base): those count as the base's. With one model there is no block (result.json has no `per_model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vllm_users.measure.columns import Records, as_columns
from vllm_users.measure.groups import Group, group_figures, rows_by
from vllm_users.measure.metrics import Slo, rows, sent_rows
from vllm_users.model_mix import ModelMix, parse_mix

__all__ = ["UNNAMED_BASE", "per_model"]

UNNAMED_BASE = "(run's model)"  # the base's name when the meta has none (a plain `locust -f` without --model)


def _mix(meta: Mapping[str, Any]) -> ModelMix | None:
    """The run's --model as a mix (None: no --model, or text that is not one: a result from elsewhere)."""
    try:
        return parse_mix(str(meta.get("model_id") or ""))
    except ValueError:
        return None


def per_model(
    records: Records,
    idx: np.ndarray | None,
    meta: Mapping[str, Any],
    *,
    slo: Slo | None = None,
    percentiles: Sequence[float] = (),
) -> dict[str, dict[str, Any]] | None:
    """result.json's `per_model` for the measured rows `idx`: model name -> its figures (the mix's order, then the
    classes' models, then others seen); None when the run sent to one model only. `slo`: --goodput's, which judges
    every model (a model's goodput fields are absent without it)."""
    c = as_columns(records)
    idx = sent_rows(c, rows(c, idx))
    mix = _mix(meta)
    by = rows_by(c, idx, "model", none_as=mix.base if mix is not None else UNNAMED_BASE)
    weights = dict(zip(mix.names, mix.weights, strict=True)) if mix is not None and mix.is_mix else {}
    named = [str(t["model"]) for t in meta.get("classes") or () if isinstance(t, Mapping) and t.get("model")]
    names = list(dict.fromkeys([*weights, *named, *sorted(by)]))
    if len(names) < 2:
        return None
    groups = {n: Group(by.get(n, idx[:0]), slo) for n in names}
    _, figures = group_figures(c, idx, groups, percentiles=percentiles)
    wsum = sum(weights.values())
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        entry: dict[str, Any] = {}
        if (
            name in weights
        ):  # a name of the mix: its weight; its share of the requests when the mix alone draws
            entry["weight"] = weights[name]  # (a class's model= takes its requests out of the mix's draw)
            if not named:
                entry["weight_share"] = weights[name] / wsum
        entry.update(figures[name])
        out[name] = entry
    return out
