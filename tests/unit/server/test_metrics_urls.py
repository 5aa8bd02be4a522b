"""--server-metrics is repeatable: each URL is sampled into its own file with its own headers, the first into
server_metrics.jsonl exactly as with one URL."""

from __future__ import annotations

import json
import os

from orchestration.server.metrics_sampler import ServerMetricsSampler, scrape_target, scrape_targets
from orchestration.settings.config import add_options, layers
from vllm_users import run_dir as R
from vllm_users.options import build, changed

RUN_HEADERS = {"Authorization": "Bearer K", "Content-Type": "application/json"}


def test_one_url_as_before() -> None:
    o = build(host="http://h:8000")
    assert scrape_targets(o.scrape, "http://h:8000", RUN_HEADERS) == [
        ("http://h:8000/metrics", {"Authorization": "Bearer K"})
    ]
    one = changed(o, server_metrics=("http://prom:9090/metrics",))
    assert scrape_target(one.scrape, "http://h:8000", RUN_HEADERS) == ("http://prom:9090/metrics", {})
    assert R.server_metrics_name(0) == R.SERVER_METRICS == "server_metrics.jsonl"


def test_several_urls_each_with_its_own_headers() -> None:
    o = changed(
        build(host="http://h:8000"),
        server_metrics=(
            "http://h:8000/metrics",  # the host's origin: the run's credentials
            "http://u:pw@replica-2:8000/metrics",  # elsewhere: only its own userinfo
            "http://replica-3:8000/metrics",  # elsewhere: nothing
            "http://h:8000/metrics",  # named twice: sampled once
        ),
    )
    got = scrape_targets(o.scrape, "http://h:8000", RUN_HEADERS)
    assert [u for u, _ in got] == [
        "http://h:8000/metrics",
        "http://replica-2:8000/metrics",
        "http://replica-3:8000/metrics",
    ]
    assert got[0][1] == {"Authorization": "Bearer K"}
    assert set(got[1][1]) == {"Authorization"} and got[1][1]["Authorization"].startswith("Basic ")
    assert got[2][1] == {}
    # --metrics-header goes to every URL
    mh = changed(o, metrics_header=("X-M: 1",))
    assert all(h.get("X-M") == "1" for _, h in scrape_targets(mh.scrape, "http://h:8000", RUN_HEADERS))


def test_flag_repeats_and_env_gives_one() -> None:
    import argparse

    p = argparse.ArgumentParser()
    add_options(p, "run")
    argv = ["--server-metrics", "http://a/metrics", "--server-metrics", "http://b/metrics"]
    values, _ = layers(p, argv, "run", environ={})
    assert values["cli"]["server_metrics"] == ("http://a/metrics", "http://b/metrics")
    values, _ = layers(p, [], "run", environ={"VLLM_LOCUST_SERVER_METRICS": "http://a/metrics"})
    assert values["env"]["server_metrics"] == ("http://a/metrics",)


def test_each_sampler_writes_its_own_file_with_its_url(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # refused ports: the scrapes fail, but each file still names its URL (no userinfo) in its first line
    for i, url in enumerate(("http://127.0.0.1:9/metrics", "http://x:y@127.0.0.1:9/other")):
        s = ServerMetricsSampler(url, os.path.join(tmp_path, R.server_metrics_name(i)), timeout=0.5)
        s.start()
        s.stop()
    first = json.loads(open(os.path.join(tmp_path, "server_metrics.jsonl")).readline())
    second = json.loads(open(os.path.join(tmp_path, "server_metrics.1.jsonl")).readline())
    assert first["url"] == "http://127.0.0.1:9/metrics" and second["url"] == "http://127.0.0.1:9/other"
