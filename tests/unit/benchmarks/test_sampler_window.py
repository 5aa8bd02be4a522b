"""The benchmarks' steady window: it starts with the load, not with a preflight's few tokens before it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from common import Sampler  # noqa: E402


def _sampler(samples: list[tuple[float, int, float]]) -> Sampler:
    s = Sampler("http://127.0.0.1:1", lambda: [])
    s.samples = samples
    return s


def test_window_skips_the_preflight_and_worker_start_up() -> None:
    # 0.25-s samples (t, tokens, worker CPU-s): a preflight streams 2 tokens at 0.5 s; the workers start up
    # (CPU, no tokens) until 4 s; then 10k tok/s at 0.5 CPU until 14 s
    samples: list[tuple[float, int, float]] = []
    for i in range(57):
        t = i * 0.25
        load = max(0.0, t - 4.0)
        samples.append((t, (2 if t >= 0.5 else 0) + int(10_000 * load), 0.3 * min(t, 4.0) + 0.5 * load))
    w = _sampler(samples).window()
    assert w["tok_s"] == pytest.approx(10_000, rel=0.01)  # counted from the preflight: ~8.6k
    assert w["tok_per_cpu_s"] == pytest.approx(20_000, rel=0.01)  # counted from the preflight: ~17k
    assert w["wall_s"] == pytest.approx(14.0 - 4.0 - 2.0 - 1.0, abs=0.3)
