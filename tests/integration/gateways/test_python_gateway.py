"""`vllm-locust run` through a Python gateway that re-serializes every SSE event with json.dumps' spacing
(`"finish_reason": "length"`, `"usage": {`), in front of simulator processes: the run's counts, tokens and
finish reasons must match what the simulators served (their own /sim/stats) and what they were asked for.

Two gateways: LiteLLM's proxy (PyPI `litellm[proxy]`, built by setup_litellm.sh into ~/.cache/vllm-locust, which
the test command runs; else VLLM_LOCUST_TEST_LITELLM or a `litellm` on PATH; skipped, saying so, where none is;
it re-serializes every event, though compact since 1.108, in its own key order and framing), and, always, the smallest honest re-serializing proxy (below, stdlib only): it forwards each
request, parses each event's JSON and writes it back with Python's default separators, one event per chunk.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from orchestration.launch.ports import free_port
from tests.integration.core.helpers import cli
from tests.integration.gateways.procs import stop
from vllm_sim.launch import start_simulator
from vllm_users.distributed.run_end import preflight_requests

pytestmark = pytest.mark.timeout(180)

N, OUT = 20, 8
# the test command builds it (setup_litellm.sh) into the cache the e2e tier's vLLM lives in; the stamp is
# written once the whole install worked
_VENV = os.path.join(
    os.environ.get("VLLM_LOCUST_CACHE") or os.path.expanduser("~/.cache/vllm-locust"), "litellm-venv"
)
LITELLM = (
    os.environ.get("VLLM_LOCUST_TEST_LITELLM")
    or (
        os.path.join(_VENV, "bin", "litellm")
        if os.path.exists(os.path.join(_VENV, ".vllm-locust-stamp"))
        else None
    )
    or shutil.which("litellm")
)
KEY = "sk-" + secrets.token_hex(16)  # LiteLLM's proxy refuses to start without a master key
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class _Reserializer(BaseHTTPRequestHandler):
    """Forwards to `server.backends` in turn; SSE events come back re-serialized with json.dumps' spacing."""

    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as a streaming gateway sets it: with Nagle's algorithm a kept-alive connection's later answers
    # wait ~40 ms for the client's delayed ACK and arrive in one read (the client rightly reads them as delivered
    # at once)
    disable_nagle_algorithm = True
    server: Any

    def log_message(self, *_args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._forward(None)

    def do_POST(self) -> None:  # noqa: N802
        self._forward(self.rfile.read(int(self.headers.get("content-length") or 0)))

    def _forward(self, body: bytes | None) -> None:
        port = self.server.next_backend()
        up = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "host"}
        up.request(self.command, self.path, body=body, headers=headers)
        resp = up.getresponse()
        sse = "text/event-stream" in (resp.getheader("content-type") or "")
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, v)
        if not sse:
            data = resp.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            up.close()
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while line := resp.readline():
            line = line.rstrip(b"\r\n")
            if not line.startswith(b"data: {"):
                continue  # blank lines: each event is written whole below
            event = b"data: " + json.dumps(json.loads(line[6:])).encode() + b"\n\n"  # the gateway's own JSON
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        done = b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        self.wfile.flush()
        up.close()


class _Gateway(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, backends: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), _Reserializer)
        self.backends = backends
        self._i = 0
        self._lock = threading.Lock()

    def next_backend(self) -> int:
        with self._lock:
            self._i += 1
            return self.backends[self._i % len(self.backends)]


@contextmanager
def reserializing_proxy(backends: list[int]) -> Iterator[str]:
    """The stdlib re-serializing gateway on 127.0.0.1:0; its URL."""
    gw = _Gateway(backends)
    t = threading.Thread(target=gw.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{gw.server_address[1]}"
    finally:
        gw.shutdown()
        gw.server_close()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"litellm exited with {proc.returncode}")
        try:
            req = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(req, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (OSError, ValueError):
            time.sleep(0.2)
    raise RuntimeError(f"litellm did not answer {url}/v1/models within {timeout} s")


@contextmanager
def litellm_proxy(tmp_path: str, backends: list[int]) -> Iterator[str]:
    """LiteLLM's proxy (offline: its local model cost map) balancing `backends` as one model; its URL."""
    assert LITELLM
    entries = "".join(
        f"""  - model_name: sim-model
    litellm_params:
      model: hosted_vllm/sim-model
      api_base: http://127.0.0.1:{p}/v1
      api_key: none
"""
        for p in backends
    )
    cfg = os.path.join(tmp_path, "litellm.yaml")
    with open(cfg, "w") as fh:
        fh.write("model_list:\n" + entries + "router_settings:\n  routing_strategy: simple-shuffle\n")
    port = free_port()
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "LITELLM_MASTER_KEY": KEY,
    }
    log = open(os.path.join(tmp_path, "litellm.log"), "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [LITELLM, "--config", cfg, "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, 60)
        yield url
    finally:
        stop(proc)
        log.close()


def _served(url: str) -> int:
    with urllib.request.urlopen(url + "/sim/stats", timeout=5) as resp:
        return int(json.load(resp)["generate_requests"])


def _spaced(url: str) -> bool:
    """True when the gateway's stream is written with spaces (what this test is about)."""
    body = json.dumps(
        {
            "model": "sim-model",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "stream": True,
        }
    ).encode()
    host, port = url.rsplit("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
    text = conn.getresponse().read()
    conn.close()
    return b'"finish_reason": ' in text


GATEWAYS = [
    pytest.param("reserializing", id="stdlib-reserializing-proxy"),
    pytest.param(
        "litellm",
        id="litellm",
        marks=pytest.mark.skipif(
            not LITELLM,
            reason="LiteLLM's proxy is not installed (bash tests/integration/gateways/setup_litellm.sh)",
        ),
    ),
]


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_run_through_a_reserializing_gateway_counts_what_the_backends_served(tmp_path, gateway: str) -> None:
    with ExitStack() as stack:
        sims = [
            stack.enter_context(
                start_simulator(["--fixed", "--ttft-ms", "5", "--itl-ms", "2", "--seed", str(i)])
            )
            for i in range(2)
        ]
        ports = [s.port for s in sims]
        gw = reserializing_proxy(ports) if gateway == "reserializing" else litellm_proxy(str(tmp_path), ports)
        url = stack.enter_context(gw)
        if gateway == "reserializing":
            assert _spaced(
                url
            )  # it really writes json.dumps' spacing (LiteLLM 1.108 writes compact JSON, its own
            # key order, finish_reason on an event of its own with an empty delta, usage beside a non-empty choices)
        before = sum(_served(s.url) for s in sims)
        r = cli(
            [
                "--host",
                url,
                "--num-prompts",
                str(N),
                "--users",
                "4",
                "--workers",
                "1",
                "--output-len",
                str(OUT),
                "--ignore-eos",
                "--api-key",
                KEY,
            ],
            str(tmp_path),
        )
        served = [_served(s.url) for s in sims]
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == N and res["failed"] == 0 and res["errors_by_kind"] == {}
    assert res["total_output_tokens"] == N * OUT and res["tokens_estimated_requests"] == 0  # usage read
    assert sum(served) - before == res["completed"] + preflight_requests(r.run_dir), served
    recs = r.records()
    assert all(x["finish_reason"] == "length" for x in recs)
    assert all(_whole(x) for x in recs) and sum(len(x["chunk_times_us"]) == OUT for x in recs) > len(recs) / 2
    assert "Traceback" not in r.logs()
    assert KEY not in r.logs() and KEY not in json.dumps(res)  # the gateway's key never reaches output


def _whole(rec: dict) -> bool:
    """Every chunk of the stream timed, or (a client that read late on a busy box) all of them counted as
    delivered at once; a gateway that buffers every stream still fails the majority check beside it."""
    extra = rec.get("extra") or {}
    return len(rec["chunk_times_us"]) == OUT or extra.get("chunks_at_once") == OUT
