"""A fleet target on Kubernetes: docker/k8s/targets/vllm-fleet (vLLM replicas in a StatefulSet, a headless
Service naming each pod, HAProxy naming the replica that answered) and docker/k8s/overlays/fleet (the load
against it) render offline, validate against Kubernetes' schemas and agree with each other; `k8s render` takes
several --host URLs and per-replica --server-metrics, and `k8s wait` waits for every replica. Skipped, saying
so, where kubectl, kubernetes-validate or haproxy is absent."""

from __future__ import annotations

import http.server
import re
import shutil
import subprocess
import threading
from urllib.parse import urlsplit

import pytest
import yaml

from orchestration.k8s import wait
from orchestration.k8s.render import main as render_main
from tests.unit.deploy.conftest import K8S, find, kustomize

IMAGE = ["--image", "registry.example.com/vllm-locust:0.1"]  # render needs the image the cluster pulls

TARGET = K8S / "targets" / "vllm-fleet"
VERSIONS = ["1.30.0", "1.34.0"]  # the oldest and newest the manifests promise (test_schemas.py has them all)


def _validate(docs: list[dict]) -> None:
    kv = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (the [test] extra has it)"
    )
    for version in VERSIONS:
        for d in docs:
            kv.validate(d, version, strict=True)


def _load_config(docs: list[dict]) -> dict:
    return yaml.safe_load(find(docs, "ConfigMap", "vllm-locust-config")["data"]["config.yaml"])


def _policy_ports(docs: list[dict], role: str) -> set[int]:
    pol = find(docs, "NetworkPolicy", f"vllm-locust-{role}")["spec"]["egress"]
    return {p["port"] for rule in pol for p in rule["ports"]} - {53, 5557}


def test_the_target_renders_and_validates() -> None:
    docs = kustomize(TARGET)
    _validate(docs)
    assert {d["metadata"].get("namespace") for d in docs} == {None, "llm"}
    assert find(docs, "Service", "vllm-pods")["spec"]["clusterIP"] == "None"  # headless: per-pod DNS
    assert find(docs, "StatefulSet", "vllm")["spec"]["serviceName"] == "vllm-pods"


def test_the_router_names_each_replica_as_the_load_scrapes_it() -> None:
    target, load = kustomize(TARGET), kustomize(K8S / "overlays" / "fleet")
    cfg = find(target, "ConfigMap", "vllm-router")["data"]["haproxy.cfg"]
    servers = re.findall(r"^\s*server (\S+) (\S+):(\d+) ", cfg, flags=re.M)
    sts = find(target, "StatefulSet", "vllm")
    pods = [f"vllm-{i}" for i in range(sts["spec"]["replicas"])]
    # the header's value is the server's name (`%s`); a name that is the pod's ties per_replica to its /metrics
    assert [name for name, _, _ in servers] == pods
    assert [addr for _, addr, _ in servers] == [f"{p}.vllm-pods.llm.svc.cluster.local" for p in pods]
    assert "http-response set-header X-Served-By %s" in cfg and "option http-no-delay" in cfg
    opts = _load_config(load)
    assert opts["replica_header"].lower() == "x-served-by"
    assert opts["server_metrics"] == [f"http://{a}:{port}/metrics" for _, a, port in servers]
    router = urlsplit(opts["host"])
    svc = find(target, "Service", "vllm-router")
    assert router.hostname == "vllm-router.llm.svc.cluster.local"
    assert router.port == svc["spec"]["ports"][0]["port"]
    port = int(find(load, "ConfigMap", "vllm-locust-run")["data"]["target-port"])
    assert {router.port, *(int(p) for _, _, p in servers)} == {port}  # one port the policies allow


def test_the_router_config_is_valid_haproxy(tmp_path) -> None:
    exe = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if exe is None:
        pytest.skip("haproxy is not installed (apt-get install -y haproxy): the router's config not checked")
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(find(kustomize(TARGET), "ConfigMap", "vllm-router")["data"]["haproxy.cfg"])
    p = subprocess.run([exe, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr  # the pods' names do not resolve here: warnings, not errors


def test_render_takes_a_fleet_of_urls_and_each_replicas_metrics(tmp_path) -> None:
    hosts = tmp_path / "fleet.txt"
    hosts.write_text("# the replicas\nhttp://vllm-0.vllm-pods.llm:8000\n\nhttp://vllm-1.vllm-pods.llm:8001\n")
    out = tmp_path / "k"
    argv = ["--host", f"@{hosts}", "--endpoint-policy", "least-inflight", "--workers", "2"]
    metrics = ["--server-metrics", "http://vllm-0.vllm-pods.llm:9090/metrics"]
    assert render_main([*IMAGE, *argv, *metrics, "--namespace", "load", "-o", str(out)]) == 0
    docs = kustomize(out)
    _validate(docs)
    opts = _load_config(docs)
    # the pods have no fleet.txt: its URLs are written out
    assert opts["host"] == "http://vllm-0.vllm-pods.llm:8000,http://vllm-1.vllm-pods.llm:8001"
    assert opts["endpoint_policy"] == "least-inflight"
    assert _policy_ports(docs, "master") == {8000, 8001, 9090}  # preflight on each, /metrics scraped
    assert _policy_ports(docs, "workers") == {8000, 8001}  # the load only
    # one URL: the single target port, no patch
    one = tmp_path / "one"
    assert render_main([*IMAGE, "--host", "http://v:8000", "-o", str(one)]) == 0
    assert "patches" not in yaml.safe_load((one / "kustomization.yaml").read_text())
    assert _policy_ports(kustomize(one), "master") == {8000}


@pytest.mark.parametrize(
    "argv, why",
    [
        (["--host", "http://a:8000,ftp://b:8000"], "--host 'ftp://b:8000': expected a URL"),
        (["--host", "http://a:8000,http://a:8000"], "named twice"),
        (["--host", "http://a:8000", "--server-metrics", "http://a:x/metrics"], "--server-metrics"),
    ],
)
def test_bad_fleet_urls_are_one_line_and_exit_2(tmp_path, capsys, argv, why) -> None:
    assert render_main([*IMAGE, *argv, "-o", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1 and not (tmp_path / "k").exists()


def _health(answers: list[int]) -> http.server.HTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(answers.pop(0) if len(answers) > 1 else answers[0])
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_wait_waits_for_every_replica(capsys) -> None:
    up, late = _health([200]), _health([503, 503, 200])
    try:
        host = f"http://127.0.0.1:{up.server_port},http://127.0.0.1:{late.server_port}"
        assert wait.main(["--host", host, "--interval", "0.05", "--timeout", "5"]) == 0
        out = capsys.readouterr().out
        assert out.count("ready after") == 2 and f"127.0.0.1:{late.server_port}/health: HTTP 503" in out
        down = _health([503])
        try:
            host = f"http://127.0.0.1:{up.server_port},http://127.0.0.1:{down.server_port}"
            assert wait.main(["--host", host, "--interval", "0.05", "--timeout", "0.3"]) == 3
            assert f"127.0.0.1:{down.server_port}/health not ready" in capsys.readouterr().err
        finally:
            down.shutdown()
    finally:
        up.shutdown()
        late.shutdown()
