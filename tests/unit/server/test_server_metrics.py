"""Server metrics: parsing Prometheus text, histogram deltas, the sampler thread, clean degradation."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from orchestration.server import metrics_sampler as sm
from tests.unit.report.helpers import server_samples
from vllm_users import run_dir

PROM = """# HELP vllm:num_requests_running running
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.01",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.1
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 123.0
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50
DCGM_FI_DEV_GPU_UTIL{gpu="1"} 70
"""


def test_parse_sums_labels_and_averages_fractions() -> None:
    v = sm.parse_metrics(PROM)
    assert v["vllm:num_requests_running"] == 5.0  # summed over engines
    assert v["vllm:kv_cache_usage_perc"] == pytest.approx(0.3)  # a fraction: averaged
    assert v["DCGM_FI_DEV_GPU_UTIL"] == 60.0
    assert v["vllm:time_to_first_token_seconds_bucket|+Inf"] == 4.0
    assert not any(k.startswith("python_gc") for k in v)


def test_histogram_stats_gives_each_percentile_as_its_bucket() -> None:
    first = {"h_count": 0.0, "h_sum": 0.0, "h_bucket|0.01": 0.0, "h_bucket|0.02": 0.0, "h_bucket|+Inf": 0.0}
    last = {
        "h_count": 10.0,
        "h_sum": 0.15,
        "h_bucket|0.01": 0.0,
        "h_bucket|0.02": 10.0,
        "h_bucket|+Inf": 10.0,
    }
    st = sm.histogram_stats(first, last, "h")
    assert st is not None
    assert st["mean"] == pytest.approx(15.0)
    # every observation in the 10-20 ms bucket: that is where p50 and p99 lie, not at 15.0 and 19.9 ms
    assert st["p50_range"] == pytest.approx([10.0, 20.0]) and st["p99_range"] == pytest.approx([10.0, 20.0])
    assert "p50" not in st and "p99" not in st
    past = {**last, "h_bucket|0.02": 9.0}  # the 10th beyond the last finite edge: p99 a lower bound
    assert sm.histogram_stats(first, past, "h")["p99_range"] == pytest.approx([20.0, None])


def test_summarize_derives_hit_rate_kv_peak_and_vs_client() -> None:
    out = sm.summarize(
        server_samples(hits_ratio=0.8, kv_peak=0.6, gen_tokens=3200),
        {"mean_ttft_ms": 20.0, "median_ttft_ms": 19.0, "p99_ttft_ms": 25.0, "total_output_tokens": 3200},
    )
    assert out["available"] and out["vllm_metrics"]
    assert out["prefix_cache_hit_rate"] == pytest.approx(0.8)
    assert out["kv_cache_usage_peak"] == pytest.approx(0.6)
    assert out["running_max"] == 4.0
    assert out["ttft_ms"]["mean"] == pytest.approx(15.0)
    assert out["vs_client"]["ttft_mean_diff_ms"] == pytest.approx(5.0)
    assert out["vs_client"]["tokens_diff"] == 0
    assert len(out["timeseries"]["t"]) == 10


def test_summarize_without_vllm_names_degrades() -> None:
    out = sm.summarize(
        [{"t": 1.0, "v": {"DCGM_FI_DEV_GPU_UTIL": 10.0}}, {"t": 3.0, "v": {"DCGM_FI_DEV_GPU_UTIL": 30.0}}]
    )
    assert out["available"] and not out["vllm_metrics"]
    assert "prefix_cache_hit_rate" not in out
    assert out["gpu_util_mean"] == 20.0
    assert sm.summarize([])["available"] is False


def test_counter_reset_counts_from_zero() -> None:
    rows = [{"t": 0.0, "v": {sm.GEN_TOKENS: 500.0}}, {"t": 1.0, "v": {sm.GEN_TOKENS: 40.0}}]
    assert sm.summarize(rows)["generation_tokens"] == 40.0


def test_read_samples_skips_torn_and_error_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / run_dir.SERVER_METRICS
    p.write_text(
        '{"t": 2, "v": {"a": 1}}\n{"t": 1, "error": "HTTP 404"}\n{"t": 1, "v": {"a": 0}}\n{"t": 3, "v": {'
    )
    rows, bad = sm.read_samples(str(p))
    assert [r["t"] for r in rows] == [1, 2] and bad == 2


@pytest.fixture()
def metrics_server() -> Iterator[tuple[str, list[int]]]:
    hits: list[int] = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(1)
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = PROM.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", hits
    srv.shutdown()


def test_sampler_writes_time_series(tmp_path, metrics_server) -> None:  # type: ignore[no-untyped-def]
    url, hits = metrics_server
    path = str(tmp_path / "s.jsonl")
    s = sm.ServerMetricsSampler(url + "/metrics", path, interval=1.0)
    s.start()
    import time

    time.sleep(1.3)
    s.stop()
    rows = [json.loads(x) for x in open(path)]
    assert len(rows) >= 3  # first, one tick, the final scrape on stop
    assert all(r["v"]["vllm:num_requests_running"] == 5.0 for r in rows)
    assert "samples from" in s.status()


def test_sampler_on_server_without_metrics_warns(tmp_path, metrics_server) -> None:  # type: ignore[no-untyped-def]
    url, _ = metrics_server
    s = sm.ServerMetricsSampler(url + "/nope", str(tmp_path / run_dir.SERVER_METRICS), interval=1.0)
    s.start()
    s.stop()
    assert s.samples == 0 and s.errors >= 1
    assert "HTTP 404" in s.status() and "unavailable" in s.status()
    out = sm.summarize_file(str(tmp_path), None)
    assert out is not None and out["available"] is False
    assert "every scrape of /metrics failed" in out["reason"]
