"""Embedded vLLM-compatible simulator: OpenAI API, continuous-batching latency model, faults.

Run it with ``python -m orchestration.sim`` (or ``vllm-locust sim``); from tests, use
:func:`orchestration.sim.launch.start_simulator`.
"""

from __future__ import annotations

from .app import main

__all__ = ["main"]
