"""Garbage-collector pauses in client health: timed through gc.callbacks, reported per batch, summarised."""

from __future__ import annotations

import gc
from typing import Any

from vllm_users.measure import health
from vllm_users.measure.health import HealthSampler, summarize


def test_gc_pauses_are_timed_reported_and_summarised() -> None:
    hs = HealthSampler()
    gc.callbacks.append(hs._on_gc)
    try:
        junk = [[i, [i]] for i in range(200_000)]  # something to scan
        gc.collect()
        del junk
    finally:
        gc.callbacks.remove(hs._on_gc)
    took = hs.take()
    assert took["gc_count"][0] >= 1 and took["gc_total_ms"][0] > 0
    assert hs.gc_count == 0 and hs.gc_ms == []  # taken means reset
    row = summarize({"w": {"cpu": [0.1], "lag_ms": [1.0], **took}})["workers"]["w"]
    assert row["gc_collections"] == took["gc_count"][0]
    assert row["gc_total_ms"] >= row["gc_pause_max_ms"] >= 0
    plain = summarize({"w": {"cpu": [0.1], "lag_ms": [1.0]}})["workers"]["w"]
    assert "gc_collections" not in plain  # older workers' batches still summarise


def test_gc_switches_freeze_and_set_gen0(monkeypatch: Any) -> None:
    before = gc.get_threshold()
    monkeypatch.setattr(health, "GC_FREEZE", True)
    monkeypatch.setattr(health, "GC_GEN0", 12345)
    try:
        health.tune_gc_after_start()
        assert gc.get_threshold()[0] == 12345
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_gc_untouched_by_default(monkeypatch: Any) -> None:
    before = gc.get_threshold()
    monkeypatch.setattr(health, "GC_FREEZE", False)
    monkeypatch.setattr(health, "GC_GEN0", 0)
    gc.unfreeze()
    health.tune_gc_after_start()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
