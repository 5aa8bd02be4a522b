"""`vllm-locust sim`: the embedded vLLM-compatible simulator (vllm_sim; `python -m vllm_sim` runs the same)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str]) -> int:
    """Run the simulator with `argv` (its own flags, `vllm-locust sim --help`) until SIGTERM / Ctrl-C."""
    from vllm_sim import main as sim_main  # imported here: `vllm-locust --help` need not load the simulator

    return int(sim_main(list(argv)) or 0)
