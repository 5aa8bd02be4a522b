"""What the k8s pods are pointed at: the ports their NetworkPolicies open (each host's and /metrics URL's, once,
the first host's first) and the URL and headers `k8s wait` polls, from --host, the pods' environment or the
config file, in that order."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from orchestration.k8s.render import target_ports
from orchestration.k8s.wait import healthy, run_headers, target_host
from vllm_users.errors import UsageError


def test_target_ports_default_by_scheme_and_appear_once_in_order() -> None:
    hosts = ["https://vllm.svc", "http://vllm-0.vllm:8000", "http://vllm-1.vllm:8000"]
    assert target_ports(hosts, ["http://vllm-0.vllm:8000/metrics", "http://vllm-0.vllm:9100/metrics"]) == [
        443,
        8000,
        9100,
    ]
    assert target_ports(["http://h"], []) == [80]


def test_a_bad_metrics_url_is_one_line_without_its_credentials() -> None:
    with pytest.raises(UsageError, match="--server-metrics") as e:
        target_ports(["http://h"], ["http://user:secret@h:port/metrics"])
    assert "secret" not in str(e.value) and "\n" not in str(e.value)


def test_wait_takes_the_host_then_the_environment_then_the_config(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "run.yaml"
    cfg.write_text("host: http://from-config:8000/\nheader: ['X-A: 1', 'X-B: 2']\n", encoding="utf-8")
    monkeypatch.delenv("VLLM_LOCUST_HOST", raising=False)
    monkeypatch.delenv("VLLM_LOCUST_HEADER", raising=False)
    assert target_host(None, str(cfg)) == "http://from-config:8000"
    monkeypatch.setenv("VLLM_LOCUST_HOST", "http://from-env:8000")
    assert target_host(None, str(cfg)) == "http://from-env:8000"
    assert target_host("https://given/", str(cfg)) == "https://given"
    assert run_headers(str(cfg)) == ["X-A: 1", "X-B: 2"]
    monkeypatch.setenv("VLLM_LOCUST_HEADER", "Authorization: Bearer k")
    assert run_headers(str(cfg)) == ["Authorization: Bearer k"]  # the pods' Secret wins
    assert run_headers(None) == ["Authorization: Bearer k"]


def test_wait_without_a_url_is_a_usage_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("VLLM_LOCUST_HOST", raising=False)
    with pytest.raises(UsageError, match="no target URL"):
        target_host(None, None)
    with pytest.raises(UsageError, match="no target URL"):
        target_host("ftp://h", None)


def test_healthy_says_what_came_back_from_a_closed_port() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    said = healthy(f"http://127.0.0.1:{port}/health", timeout=2.0)
    assert said and "\n" not in said
