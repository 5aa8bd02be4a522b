"""Fixtures: a simulator process per module (fixed mode, fast), started on port 0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vllm_sim.launch import SimProcess, start_simulator


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """A fixed-mode simulator (TTFT 5 ms, ITL 1 ms) with control, prompt details and an API-less setup."""
    with start_simulator(
        [
            "--fixed",
            "--ttft-ms",
            "5",
            "--itl-ms",
            "1",
            "--enable-control",
            "--enable-prompt-tokens-details",
            "--max-model-len",
            "2048",
        ]
    ) as p:
        yield p
        assert "Traceback" not in p.stderr_text()
