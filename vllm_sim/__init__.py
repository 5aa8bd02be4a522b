"""Embedded vLLM-compatible simulator: OpenAI API, continuous-batching latency model, faults.

Run it with ``python -m vllm_sim`` (or ``vllm-locust sim``); from tests, use
:func:`vllm_sim.launch.start_simulator`.
"""

from __future__ import annotations

from .app import main

__all__ = ["main"]
