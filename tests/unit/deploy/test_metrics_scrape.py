"""The master pod serves /metrics and says so: Prometheus annotations, container and Service port, the env var
that turns --prometheus-port on, and a NetworkPolicy letting scrapers in, all on one port (render sets it)."""

from __future__ import annotations

import pytest
import yaml

from orchestration.k8s.render import main as render_main
from tests.unit.deploy.conftest import find, kustomize
from vllm_users.options import env_name

IMAGE = ["--image", "registry.example.com/vllm-locust:0.1"]  # render needs the image the cluster pulls


def _ports(docs: list[dict]) -> set[int]:
    """Every place the master's metrics port appears (they must agree)."""
    job = find(docs, "Job", "vllm-locust-master")["spec"]["template"]
    ann = job["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/path"] == "/metrics"
    master = next(c for c in job["spec"]["containers"] if c["name"] == "master")
    env = next(e["value"] for e in master["env"] if e["name"] == env_name("prometheus_port"))
    container = next(p["containerPort"] for p in master["ports"] if p["name"] == "metrics")
    svc = next(
        p for p in find(docs, "Service", "vllm-locust-master")["spec"]["ports"] if p["name"] == "metrics"
    )
    pol = find(docs, "NetworkPolicy", "vllm-locust-master-metrics")["spec"]
    assert pol["podSelector"] == {"matchLabels": {"app": "vllm-locust", "role": "master"}}
    assert pol["policyTypes"] == ["Ingress"]
    (rule,) = pol["ingress"]
    return {
        int(ann["prometheus.io/port"]),
        int(env),
        container,
        svc["port"],
        svc["targetPort"],
        *(p["port"] for p in rule["ports"]),
    }


def test_every_overlay_annotates_the_master_for_scraping(overlay) -> None:  # type: ignore[no-untyped-def]
    _, docs = overlay
    assert _ports(docs) == {9409}
    # the workers serve nothing: no annotation, no port
    workers = find(docs, "Job", "vllm-locust-workers")["spec"]["template"]
    assert "annotations" not in workers["metadata"]


def test_render_passes_the_port(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "k"
    assert render_main([*IMAGE, "--host", "http://v:8000", "--prometheus-port", "9555", "-o", str(out)]) == 0
    docs = kustomize(out)
    assert _ports(docs) == {9555}
    assert "prometheus_port" not in yaml.safe_load(
        (out / "config.yaml").read_text()
    )  # the env var carries it
    assert render_main([*IMAGE, "--host", "http://v:8000", "-o", str(tmp_path / "d")]) == 0
    assert _ports(kustomize(tmp_path / "d")) == {9409}


@pytest.mark.parametrize("port", ["5557", "70000"])
def test_render_refuses_a_port_the_pod_cannot_serve(tmp_path, capsys, port) -> None:  # type: ignore[no-untyped-def]
    try:  # 5557: render's own refusal (exit 2); 70000: the option's port type (argparse's one line, exit 2)
        code = render_main(
            [*IMAGE, "--host", "http://v:8000", "--prometheus-port", port, "-o", str(tmp_path / "k")]
        )
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert "--prometheus-port" in err and port in err and not (tmp_path / "k").exists()
