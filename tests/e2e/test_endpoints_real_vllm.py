"""`--endpoint embeddings|rerank|score|responses` against real vLLM for CPU.

The pooling endpoints run on two servers of this module's own, both the tiny Llama made a pooling model: an
embedding model (`--runner pooling --convert embed`; vLLM 0.32 also serves /v1/score and /v1/rerank for it, a
bi-encoder: the cosine of the two embeddings) and a cross-encoder (`--convert classify` with a one-label head taken
from the LM head's row of one token, `--hf-overrides`: nothing is downloaded). The Responses API runs on the tier's
normal server (`vllm_server`, tests/e2e/test_responses_real_vllm.py). Each load is small: the token counts are what is checked (ours against the
server's usage and its `vllm:prompt_tokens_total`), and which figures are absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest

from tests.e2e import speed
from tests.e2e.test_scenarios_real_vllm import run_vllm_locust
from tests.e2e.vllm_env import VllmEnv, VllmServer, scrape_metrics, start_vllm_server
from vllm_users.exit_codes import PREFLIGHT

PROMPT_TOKENS = "vllm:prompt_tokens_total"
N = 8


@pytest.fixture(scope="module")
def pooling_server(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The tiny model as an embedding model (one server for the module)."""
    log_dir = tmp_path_factory.mktemp("vllm-logs-pooling")
    with start_vllm_server(
        vllm_env,
        log_dir=log_dir,
        extra_args=("--runner", "pooling", "--convert", "embed"),
        startup_timeout=speed.scaled(600),
    ) as server:
        yield server


# a cross-encoder made from the same causal LM: a one-label classifier whose weights are the LM head's row of one
# token (vLLM's online conversion, as for Qwen3-Reranker); num_labels = 1 enables /v1/score and /v1/rerank
CROSS_ENCODER = (
    "--runner",
    "pooling",
    "--convert",
    "classify",
    "--hf-overrides",
    json.dumps({"classifier_from_token": ["yes"], "method": "no_post_processing"}),
)


@pytest.fixture(scope="module")
def cross_encoder(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The tiny model as a cross-encoder reranker (one server for the module; started after the embedding tests)."""
    log_dir = tmp_path_factory.mktemp("vllm-logs-cross-encoder")
    with start_vllm_server(
        vllm_env, log_dir=log_dir, extra_args=CROSS_ENCODER, startup_timeout=speed.scaled(600)
    ) as server:
        yield server


def _post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _preflight_tokens(server: VllmServer, endpoint: str) -> int:
    """The prompt tokens of the preflight's one probe request (orchestration/server/preflight.py's _PROBES): the
    server's counter counts it beside the load."""
    from orchestration.server.preflight import _PROBES

    path, body = _PROBES[endpoint]
    usage = _post(server.url, path, {"model": server.model_name, **body})["usage"]
    return int(usage.get("prompt_tokens") or usage["total_tokens"])


def test_an_endpoint_the_server_lacks_is_one_line_and_exit_3(pooling_server: VllmServer, tmp_path) -> None:
    """~1-1.5 min where it runs first: the time is the pooling server's start (its fixture), the test itself takes
    seconds."""
    argv = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--host",
        pooling_server.url,
        "--endpoint",
        "completions",
        "--num-prompts",
        "2",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "x",
        "--quiet",
        "--no-report",
        "--workers",
        "1",
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=speed.scaled(300))
    assert p.returncode == PREFLIGHT, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and "--endpoint completions: POST /v1/completions" in lines[0] and "404" in lines[0]
    ), lines


@pytest.mark.parametrize(
    ("server", "endpoint", "args", "inputs"),
    [
        ("pooling_server", "embeddings", ("--embed-batch", "2"), 2),
        ("pooling_server", "score", ("--rerank-docs", "2"), 3),  # a bi-encoder: vLLM scores by cosine
        ("pooling_server", "rerank", ("--rerank-docs", "2"), 3),
        ("cross_encoder", "score", ("--rerank-docs", "2"), 3),
        ("cross_encoder", "rerank", ("--rerank-docs", "2"), 3),
    ],
)
def test_pooling_endpoint(
    request: pytest.FixtureRequest, tmp_path, server: str, endpoint: str, args: tuple[str, ...], inputs: int
) -> None:
    """Seconds each, except the first on the cross-encoder (~1 min): that is its server's start (its fixture)."""
    pooling_server: VllmServer = request.getfixturevalue(server)
    probe = _preflight_tokens(pooling_server, endpoint)
    before = scrape_metrics(pooling_server.url).get(PROMPT_TOKENS)
    out = run_vllm_locust(
        pooling_server.url,
        tmp_path,
        endpoint,
        "--endpoint",
        endpoint,
        *args,
        "--input-len",
        "16",
        "--num-prompts",
        str(N),
        "-u",
        "2",
        "--workers",
        "1",
    )
    after = scrape_metrics(pooling_server.url).get(PROMPT_TOKENS)
    res = out.result
    assert res["completed"] == N and res["failed"] == 0
    assert all(r.endpoint == endpoint and r.not_streamed and r.output_tokens is None for r in out.records)
    assert all(r.prompt_tokens is not None and r.prompt_tokens >= 16 * inputs for r in out.records)
    assert res["total_input_tokens"] == sum(r.prompt_tokens or 0 for r in out.records)
    assert before is not None and after is not None, "vLLM exports vllm:prompt_tokens_total"
    # the server counted what its usage said: the load's prompt tokens and the preflight's one probe
    counted = after - before
    assert counted == res["total_input_tokens"] + probe, (counted, res["total_input_tokens"], probe)
    print(
        f"\n{endpoint}: {N} requests, {res['total_input_tokens']} prompt tokens (server: {counted:.0f} - "
        f"{probe} preflight), E2EL p50 {res['median_e2el_ms']:.1f} ms p99 {res['p99_e2el_ms']:.1f} ms"
    )
    assert res["mean_e2el_ms"] > 0 and res["median_e2el_ms"] > 0 and "p99_e2el_ms" in res
    assert not any(k.endswith(("_ttft_ms", "_itl_ms", "_tpot_ms")) for k in res)  # absent, not 0
    assert res["total_output_tokens"] is None and res["input_throughput"] > 0
