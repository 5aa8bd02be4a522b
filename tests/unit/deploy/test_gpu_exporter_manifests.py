"""The gpu-exporter sidecar beside the fleet's vLLM pods (docker/k8s/targets/vllm-fleet) and the fleet overlay
that scrapes it (--gpu-metrics, the master's NetworkPolicy open to its port): rendered offline, validated against
Kubernetes' schemas, and agreeing with each other; `k8s render` opens each --gpu-metrics port to the master."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import yaml

from orchestration.k8s.render import main as render_main
from tests.unit.deploy.conftest import K8S, find, kustomize

TARGET = K8S / "targets" / "vllm-fleet"


def test_the_sidecar_runs_beside_each_replica_and_validates() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    docs = kustomize(TARGET)
    for d in docs:
        kv.validate(d, "1.34.0", strict=True)
    pod = find(docs, "StatefulSet", "vllm")["spec"]["template"]["spec"]
    side = next(c for c in pod["containers"] if c["name"] == "gpu-exporter")
    assert side["command"][:4] == ["vllm-locust", "gpu-exporter", "--port", "9400"]
    assert "nvidia.com/gpu" not in (side.get("resources", {}).get("limits") or {})  # reads, holds no GPU
    env = {e["name"]: e for e in side["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    ports = {p["port"] for p in find(docs, "Service", "vllm-pods")["spec"]["ports"]}
    assert 9400 in ports


def test_the_fleet_overlay_scrapes_every_replicas_sidecar() -> None:
    target, load = kustomize(TARGET), kustomize(K8S / "overlays" / "fleet")
    cfg = yaml.safe_load(find(load, "ConfigMap", "vllm-locust-config")["data"]["config.yaml"])
    replicas = find(target, "StatefulSet", "vllm")["spec"]["replicas"]
    hosts = [urlsplit(u) for u in cfg["gpu_metrics"]]
    assert [h.hostname.split(".")[0] for h in hosts] == [f"vllm-{i}" for i in range(replicas)]
    assert {h.port for h in hosts} == {9400}
    egress = find(load, "NetworkPolicy", "vllm-locust-master")["spec"]["egress"][0]["ports"]
    assert {p["port"] for p in egress} >= {8000, 9400}
    workers = find(load, "NetworkPolicy", "vllm-locust-workers")["spec"]["egress"][1]["ports"]
    assert 9400 not in {p["port"] for p in workers}  # only the master scrapes


def test_render_opens_each_gpu_metrics_port_to_the_master(tmp_path) -> None:
    out = tmp_path / "k"
    rc = render_main(
        [
            "--host",
            "http://vllm.llm:8000",
            "--gpu-metrics",
            "http://node-a.gpu:9400/metrics",
            "--image",
            "registry.example.com/vllm-locust:0.1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    docs = kustomize(out)
    egress = find(docs, "NetworkPolicy", "vllm-locust-master")["spec"]["egress"][0]["ports"]
    assert {p["port"] for p in egress} == {8000, 9400}
    cfg = yaml.safe_load(find(docs, "ConfigMap", "vllm-locust-config")["data"]["config.yaml"])
    assert cfg["gpu_metrics"] == ["http://node-a.gpu:9400/metrics"]


def test_render_refuses_a_gpu_exporter_credential_in_the_configmap(tmp_path, capsys) -> None:
    rc = render_main(
        [
            "--host",
            "http://vllm.llm:8000",
            "--gpu-metrics",
            "http://u:p@node-a:9400/metrics",
            "--image",
            "registry.example.com/vllm-locust:0.1",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 2 and "--gpu-metrics" in capsys.readouterr().err
