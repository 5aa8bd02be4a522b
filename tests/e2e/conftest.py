"""e2e tier: tests against a real vLLM (CPU build) serving a tiny random Llama.

Every test under tests/e2e is marked ``e2e``. ``VLLM_LOCUST_SKIP_E2E=1`` skips them all.
The first run builds ~/.cache/vllm-locust (or $VLLM_LOCUST_CACHE): ~4 min, ~3.4 GB; later runs reuse it.
The session-scoped ``vllm_server`` fixture starts one server (~2 min on 2 cores) and stops it at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.vllm_env import VllmEnv, VllmServer, ensure_vllm, start_vllm_server

E2E_DIR = Path(__file__).resolve().parent
SKIP_REASON = "VLLM_LOCUST_SKIP_E2E=1: real-vLLM e2e tier skipped"
# The first e2e test pays for the session fixture: a cold setup (~2-4 min) plus server startup (~1 min).
E2E_TIMEOUT_S = 900


def _skip_requested() -> bool:
    return os.environ.get("VLLM_LOCUST_SKIP_E2E", "").strip().lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason=SKIP_REASON) if _skip_requested() else None
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))
            if skip is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_env() -> VllmEnv:
    if _skip_requested():
        pytest.skip(SKIP_REASON)
    return ensure_vllm()


@pytest.fixture(scope="session")
def vllm_server(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory):
    log_dir = tmp_path_factory.mktemp("vllm-logs")
    with start_vllm_server(vllm_env, log_dir=log_dir) as server:
        yield server


@pytest.fixture(scope="session")
def vllm_server_details(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory):
    """Like vllm_server plus --enable-prompt-tokens-details (usage reports cached_tokens). A server of its
    own: the golden transcripts that vllm_server is checked against were recorded without the flag."""
    log_dir = tmp_path_factory.mktemp("vllm-logs-details")
    with start_vllm_server(
        vllm_env, log_dir=log_dir, extra_args=["--enable-prompt-tokens-details"]
    ) as server:
        yield server


__all__ = ["VllmServer"]
