"""HTTPS in the cluster: `k8s render` mounts the CA bundle (a generated ConfigMap, or an existing one) and a
client certificate Secret into both Jobs and points config.yaml at them; `k8s wait` reads the same settings."""

from __future__ import annotations

import yaml

from orchestration.k8s import tls as k8s_tls
from orchestration.k8s.render import main as render_main
from tests.unit.client.tls_certs import make_certs
from tests.unit.deploy.conftest import containers, find, kustomize
from vllm_users.client.tls import TLSConfig

IMAGE = ["--image", "registry.example.com/vllm-locust:0.1"]  # render needs the image the cluster pulls

HOST = ["--host", "https://vllm.llm.svc:8443", "--workers", "2"]
JOBS = ("vllm-locust-master", "vllm-locust-workers")


def _mounts(job: dict) -> list[set[tuple[str, str]]]:
    return [{(m["name"], m["mountPath"]) for m in c.get("volumeMounts", [])} for c in containers(job)]


def test_ca_bundle_and_client_secret_are_mounted_in_every_pod(tmp_path) -> None:
    ca = make_certs(tmp_path / "certs").ca
    out = tmp_path / "k"
    assert (
        render_main(
            [*IMAGE, *HOST, "--client-tls-secret", "llm-client", "-o", str(out), "--ca-bundle", str(ca)]
        )
        == 0
    )
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["ca_bundle"] == f"{k8s_tls.CA_DIR}/ca.crt"
    assert (cfg["client_cert"], cfg["client_key"]) == (
        f"{k8s_tls.CLIENT_DIR}/tls.crt",
        f"{k8s_tls.CLIENT_DIR}/tls.key",
    )
    docs = kustomize(out)
    assert find(docs, "ConfigMap", "vllm-locust-ca")["data"]["ca.crt"] == ca.read_text()
    for name in JOBS:
        job = find(docs, "Job", name)
        volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
        assert volumes["tls-ca"]["configMap"]["name"] == "vllm-locust-ca"
        assert volumes["tls-client"]["secret"]["secretName"] == "llm-client"
        for mounts in _mounts(job):  # the /health wait and the load both connect over TLS
            assert {("tls-ca", k8s_tls.CA_DIR), ("tls-client", k8s_tls.CLIENT_DIR)} <= mounts


def test_an_existing_ca_configmap_instead_of_a_file(tmp_path) -> None:
    out = tmp_path / "k"
    assert render_main([*IMAGE, *HOST, "--ca-configmap", "kube-root-ca.crt", "-o", str(out)]) == 0
    docs = kustomize(out)
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "vllm-locust-ca"]
    for name in JOBS:
        volumes = find(docs, "Job", name)["spec"]["template"]["spec"]["volumes"]
        assert {"name": "tls-ca", "configMap": {"name": "kube-root-ca.crt"}} in volumes
    assert yaml.safe_load((out / "config.yaml").read_text())["ca_bundle"] == f"{k8s_tls.CA_DIR}/ca.crt"


def test_a_private_key_never_goes_into_the_rendered_files(tmp_path, capsys) -> None:
    key = tmp_path / "client.key"
    key.write_text("secret")
    rc = render_main(
        [*IMAGE, *HOST, "--client-cert", str(key), "--client-key", str(key), "-o", str(tmp_path / "k")]
    )
    assert rc == 2
    assert "--client-tls-secret" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()


def test_wait_reads_the_runs_tls_settings(tmp_path, monkeypatch) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("host: https://x:1\nca_bundle: /etc/ca.crt\n")
    monkeypatch.delenv("VLLM_LOCUST_INSECURE", raising=False)
    assert k8s_tls.config_tls(str(cfg)) == TLSConfig(ca_bundle="/etc/ca.crt")
    monkeypatch.setenv("VLLM_LOCUST_INSECURE", "1")
    assert k8s_tls.config_tls(str(cfg)) == TLSConfig(ca_bundle="/etc/ca.crt", insecure=True)
