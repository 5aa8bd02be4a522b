"""--header, the API key and URL userinfo reach every request sent off the hot path: --reset-prefix-cache,
--profile, the /metrics sampler and the master's scrape after the drain, calibrate's probe, sweep-server's /health,
the moe preset's expert counters. A server that answers 401 without the credentials tells."""

from __future__ import annotations

import base64
import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orchestration.capacity.serve_sweep import ServerProcess
from orchestration.server.metrics_sampler import ServerMetricsSampler
from orchestration.server.moe_experts import expert_counters
from orchestration.server.preflight import reset_prefix_cache
from orchestration.twin.probe import Budget, Probe
from vllm_users.distributed.server_profile import ServerProfile
from vllm_users.distributed.server_scrape import scrape

pytestmark = pytest.mark.timeout(30)
NEED = {"X-Gateway-Token": "gw-7", "Authorization": "Basic " + base64.b64encode(b"al:pw").decode()}
METRICS = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"


@contextmanager
def _gated() -> Iterator[tuple[str, list[str]]]:
    """A server that answers 200 only to requests carrying NEED; yields its URL and the paths it refused."""
    refused: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            if self.headers.get("Content-Length"):
                self.rfile.read(int(self.headers["Content-Length"]))
            ok = all(self.headers.get(k) == v for k, v in NEED.items())
            if not ok:
                refused.append(self.path)
            body = METRICS if self.path == "/metrics" else b"{}"
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 - http.server's names

        def log_message(self, *_: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", refused
    finally:
        srv.shutdown()


def test_reset_prefix_cache_and_profile_carry_the_headers() -> None:
    with _gated() as (url, refused):
        userinfo = url.replace("http://", "http://al:pw@")
        assert reset_prefix_cache(userinfo, None, {"X-Gateway-Token": "gw-7"}).startswith(
            "prefix cache reset"
        )
        prof = ServerProfile(url, NEED)
        prof.start()
        assert prof.stop()["profiled"] is True
    assert refused == []


def test_metrics_sampler_and_the_masters_scrape_carry_the_headers(tmp_path) -> None:
    with _gated() as (url, refused):
        path = str(tmp_path / "server_metrics.jsonl")
        sampler = ServerMetricsSampler(
            url.replace("http://", "http://al:pw@") + "/metrics", path, headers={"X-Gateway-Token": "gw-7"}
        )
        sampler.start()
        sampler.stop()
        first = json.loads(open(path).readline())
        assert first["url"] == url + "/metrics" and first["v"]["vllm:num_requests_running"] == 3.0
        assert scrape(first["url"], headers=NEED) == {"vllm:num_requests_running": 3.0}
        assert expert_counters(url, headers=NEED) is None  # answered (no expert series), not refused
    assert refused == []
    assert "al:pw" not in open(path).read()


def test_calibrate_probe_and_sweep_server_health_carry_the_headers() -> None:
    with _gated() as (url, refused):
        probe = Probe(url, "m", Budget(10.0), None, 0, extra_headers=NEED)
        assert probe.get("/v1/models")[0] == 200
        server = ServerProcess.__new__(ServerProcess)  # only its /health poll, no process to start
        server.proc = type("Alive", (), {"poll": lambda self: None, "returncode": None})()
        ok, _, why = server.wait_healthy(
            url.replace("http://", "http://al:pw@"), 5.0, {"X-Gateway-Token": "gw-7"}
        )
        assert ok, why
    assert refused == []


def test_sweep_server_never_writes_the_servers_key(monkeypatch) -> None:
    from orchestration.capacity.serve_sweep import shown_cmd

    monkeypatch.setenv("VLLM_LOCUST_API_KEY", "sk-run-1234")
    argv = ["vllm", "serve", "m", "--api-key", "sk-serve-99", "--x=sk-run-1234", "--url", "http://u:pw12@h"]
    assert shown_cmd(argv) == "vllm serve m --api-key '***' --x=*** --url http://h"


def test_a_preflight_error_that_quotes_the_credentials_shows_none(capsys) -> None:
    from orchestration.server.preflight import PreflightError, check_server

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._send(200, b'{"data": [{"id": "m"}]}')

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(400, f"bad request from {self.headers.get('X-Gateway-Token')}".encode())

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(PreflightError) as e:
            check_server(
                f"http://127.0.0.1:{srv.server_address[1]}", "m", None, headers={"X-Gateway-Token": "gw-77x"}
            )
    finally:
        srv.shutdown()
    assert "bad request from ***" in str(e.value) and "gw-77x" not in str(e.value)
