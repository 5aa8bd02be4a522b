"""Garbage-collector pauses in client health: timed through gc.callbacks, reported per batch, summarised."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from typing import Any

import pytest

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


def test_gc_gen0_zero_leaves_the_collector_alone(monkeypatch: Any) -> None:
    before = gc.get_threshold()
    monkeypatch.setattr(health, "GC_FREEZE", False)
    monkeypatch.setattr(health, "GC_GEN0", 0)
    gc.unfreeze()
    health.tune_gc_after_start()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_gc_settings_default_and_env() -> None:
    assert health.gc_settings({}) == (False, health.GC_GEN0_DEFAULT) == (False, 5000)
    assert health.gc_settings({"VLLM_LOCUST_GC_GEN0": "0"}) == (False, 0)
    assert health.gc_settings({"VLLM_LOCUST_GC_GEN0": " 900 ", "VLLM_LOCUST_GC_FREEZE": "1"}) == (True, 900)
    with pytest.raises(ValueError, match="VLLM_LOCUST_GC_GEN0='-3'"):
        health.gc_settings({"VLLM_LOCUST_GC_GEN0": "-3"})


def test_bad_gc_env_is_one_line_and_non_zero() -> None:
    env = dict(os.environ, VLLM_LOCUST_GC_GEN0="lots")
    p = subprocess.run(
        [sys.executable, "-c", "import vllm_users.measure.health"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        "vllm-locust: VLLM_LOCUST_GC_GEN0='lots': expected a whole number (0: Python's default)"
    ]
