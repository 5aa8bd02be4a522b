"""docker/k8s: the overlays render offline, agree with each other and with the CLI, and are what an operator
accepts (limits, non-root, read-only root, TTL, NetworkPolicy, readiness wait)."""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

import yaml

from orchestration.commands.run import run_options
from tests.unit.deploy.conftest import K8S, ROOT, containers, find, kustomize


def _config(docs: list[dict]) -> dict:
    return yaml.safe_load(find(docs, "ConfigMap", "vllm-locust-config")["data"]["config.yaml"])


def test_docker_k8s_is_the_default_overlay() -> None:
    assert kustomize(K8S) == kustomize(K8S / "overlays" / "default")


def test_worker_count_comes_from_one_value(overlay) -> None:
    name, docs = overlay
    count = int(find(docs, "ConfigMap", "vllm-locust-run")["data"]["workers"])
    workers = find(docs, "Job", "vllm-locust-workers")["spec"]
    master = find(docs, "Job", "vllm-locust-master")["spec"]["template"]["spec"]["containers"][0]
    expect = next(e["value"] for e in master["env"] if e["name"] == "VLLM_LOCUST_EXPECT_WORKERS")
    assert workers["parallelism"] == workers["completions"] == int(expect) == count
    assert {"default": 4, "small": 1, "large": 32, "pvc": 4, "fleet": 8}[name] == count


def test_master_and_workers_share_the_options_file_and_the_service(overlay) -> None:
    _, docs = overlay
    master = find(docs, "Job", "vllm-locust-master")["spec"]["template"]["spec"]["containers"][0]
    worker = find(docs, "Job", "vllm-locust-workers")["spec"]["template"]["spec"]["containers"][0]
    margs, wargs = master["args"], worker["args"]
    assert margs[margs.index("--config") + 1] == wargs[wargs.index("--config") + 1] == "/config/config.yaml"
    assert "--scenario" not in wargs  # the worker reads the master's scenario from the same file
    svc = find(docs, "Service", "vllm-locust-master")
    assert wargs[wargs.index("--master-host") + 1] == svc["metadata"]["name"]
    assert str(svc["spec"]["ports"][0]["port"]) == margs[margs.index("--master-port") + 1]
    assert "--print-result" in margs and margs[margs.index("--workers") + 1] == "0"


def test_target_port_is_the_config_hosts_and_the_only_one_allowed(overlay) -> None:
    _, docs = overlay
    host = urlsplit(_config(docs)["host"])
    port = int(find(docs, "ConfigMap", "vllm-locust-run")["data"]["target-port"])
    assert port == (host.port or 80)
    for role in ("master", "workers"):
        pol = find(docs, "NetworkPolicy", f"vllm-locust-{role}")["spec"]
        assert pol["policyTypes"] == ["Ingress", "Egress"]
        ports = sorted(p["port"] for rule in pol["egress"] for p in rule["ports"])
        # the master scrapes each --gpu-metrics exporter too (the fleet's gpu-exporter sidecars)
        scraped = {urlsplit(u).port for u in _config(docs).get("gpu_metrics") or ()} - {port}
        more = sorted(scraped) if role == "master" else [5557]
        assert ports == sorted([port, 53, 53, *more])
    assert find(docs, "NetworkPolicy", "vllm-locust-workers")["spec"]["ingress"] == []
    master_in = find(docs, "NetworkPolicy", "vllm-locust-master")["spec"]["ingress"]
    assert master_in == [
        {
            "from": [{"podSelector": {"matchLabels": {"app": "vllm-locust", "role": "worker"}}}],
            "ports": [{"protocol": "TCP", "port": 5557}],
        }
    ]


def test_what_an_operator_asks_for(overlay) -> None:
    _, docs = overlay
    for name in ("vllm-locust-master", "vllm-locust-workers"):
        job = find(docs, "Job", name)
        assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] > 0
        pod = job["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert [c["args"][:2] for c in pod["initContainers"]] == [
            ["k8s", "wait"]
        ]  # the target's /health first
        for c in containers(job):
            assert set(c["resources"]) == {"requests", "limits"}, c["name"]
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
        main = pod["containers"][0]
        mounts = {m["mountPath"] for m in main["volumeMounts"]}
        assert "/tmp" in mounts and (name.endswith("workers") or "/results" in mounts)


def test_pvc_overlay_keeps_results_on_a_claim() -> None:
    docs = kustomize(K8S / "overlays" / "pvc")
    vols = find(docs, "Job", "vllm-locust-master")["spec"]["template"]["spec"]["volumes"]
    results = next(v for v in vols if v["name"] == "results")
    assert results == {"name": "results", "persistentVolumeClaim": {"claimName": "vllm-locust-results"}}
    assert (
        find(docs, "PersistentVolumeClaim", "vllm-locust-results")["metadata"]["namespace"] == "vllm-locust"
    )


def test_api_key_only_from_a_secret(overlay) -> None:
    _, docs = overlay
    for name in ("vllm-locust-master", "vllm-locust-workers"):
        env = find(docs, "Job", name)["spec"]["template"]["spec"]["containers"][0]["env"]
        key = next(e for e in env if e["name"] == "VLLM_LOCUST_API_KEY")
        assert "secretKeyRef" in key["valueFrom"] and "value" not in key
    assert "api_key" not in _config(docs)


def test_config_files_are_valid_for_vllm_locust_run(tmp_path) -> None:
    for path in sorted((K8S / "overlays").glob("*/config.yaml")):
        a = run_options(["--config", str(path)])  # raises UsageError when invalid
        assert a.server.host.startswith("http://") and a.request.ignore_eos is True, path
    a = run_options(["--config", str(K8S / "overlays" / "default" / "config.yaml")])
    # a list in the file, one text option
    assert a.load.request_rate == 20 and a.measure.goodput == "ttft:1000 tpot:100"


def test_dockerfile_copies_what_exists_and_takes_its_base_as_an_arg() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (.+) \S+$", text, flags=re.M):
        for path in src.split():
            assert os.path.exists(ROOT / path), path
    assert re.search(r"^ARG BASE=python:3\.11-slim$", text, flags=re.M) and "FROM ${BASE}" in text
    assert "USER 10001" in text  # the manifests' runAsUser
