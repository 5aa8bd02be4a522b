"""The master's scrape after the drain against the sampler's before the load: server_served from
vllm:request_success_total's increase (absent, never 0, where the server has no such counter or no baseline)."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator

import pytest

from vllm_users.distributed.run_end import with_server_served
from vllm_users.distributed.server_scrape import around_load
from vllm_users.measure.run_result import RunResult
from vllm_users.measure.server_counters import LoadCounters
from vllm_users.options import Options
from vllm_users.run_dir import SERVER_METRICS

AFTER = """# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 20.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 0.0
vllm:request_success_total{engine="0",finished_reason="error",model_name="m"} 3.0
"""


@pytest.fixture()
def metrics_url() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = AFTER.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()
    srv.server_close()


def _samples(tmp: str, *rows: dict) -> str:  # type: ignore[type-arg]
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, SERVER_METRICS), "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    return tmp


def _result(completed: int, failed: int = 0, **metrics: object) -> RunResult:
    return RunResult(
        date=None,
        backend=None,
        model_id=None,
        tokenizer_id=None,
        num_prompts=None,
        request_rate=None,
        burstiness=None,
        max_concurrency=None,
        metrics={"completed": completed, "failed": failed, "interrupted": 0, **metrics},
    )


def test_served_is_the_counters_increase_over_the_load(tmp_path, metrics_url) -> None:  # type: ignore[no-untyped-def]
    tmp = _samples(
        str(tmp_path),
        {"t": 1.0, "v": {"vllm:request_success_total": 10.0}, "url": metrics_url},
        {"t": 3.0, "v": {"vllm:request_success_total": 19.0}},
    )
    counters = around_load(tmp)
    assert counters is not None and counters.served == 20  # 30 now less 10 before the load
    res = with_server_served(_result(17, 3), Options().handoff, tmp, "http://h", counters)
    assert (res.server_served, res.missing_vs_server) == (20, 0)
    res = with_server_served(_result(15, 3), Options().handoff, tmp, "http://h", counters)
    assert res.missing_vs_server == 2  # the server finished two requests we have no record of
    # --warmup's requests are recorded too, outside the measured window
    res = with_server_served(
        _result(12, 3, windows={"warmup": {"requests": 5}, "measured": {"requests": 15}}),
        Options().handoff,
        tmp,
        "http://h",
        counters,
    )
    assert res.missing_vs_server == 0


def test_no_counter_no_baseline_no_fields(tmp_path, metrics_url) -> None:  # type: ignore[no-untyped-def]
    assert around_load(str(tmp_path)) is None  # --no-server-metrics: no file
    assert (
        around_load(_samples(str(tmp_path / "a"), {"t": 1.0, "v": {}})) is None
    )  # no scrape from before the load
    assert (
        around_load(_samples(str(tmp_path / "b"), {"t": 1.0, "error": "HTTP 404", "url": metrics_url}))
        is None
    )
    without = LoadCounters("u", {}, {"vllm:num_requests_running": 0.0})  # a server without the counter
    assert without.served is None
    res = with_server_served(_result(10), Options().handoff, str(tmp_path), "http://h", without)
    assert res.server_served is None and res.missing_vs_server is None
    assert "server_served" not in res.to_json()
