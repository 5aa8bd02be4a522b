"""Every rendered manifest validates against Kubernetes' OpenAPI schemas (kubernetes-validate, strict: an
unknown field is an error) for the versions users run."""

from __future__ import annotations

import copy

import pytest

from orchestration.k8s.render import main as render_main
from tests.unit.deploy.conftest import containers, find, kustomize

IMAGE = ["--image", "registry.example.com/vllm-locust:0.1"]  # render needs the image the cluster pulls

kv = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate not installed (the [test] extra has it)"
)
VERSIONS = ["1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]


def _validate(docs: list[dict], version: str) -> None:
    for d in docs:
        kv.validate(d, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_overlays_validate(overlay, version) -> None:
    _validate(overlay[1], version)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("render") / "k"
    assert (
        render_main(
            [
                *IMAGE,
                "--host",
                "http://vllm.llm:8080",
                "--workers",
                "3",
                "--pvc",
                "20Gi",
                "--namespace",
                "load",
                "--request-rate",
                "50",
                "--run-time",
                "10m",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    return kustomize(out)


@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_run_validates(rendered, version) -> None:
    _validate(rendered, version)


def test_the_validator_catches_a_wrong_field(overlay) -> None:
    job = copy.deepcopy(find(overlay[1], "Job", "vllm-locust-master"))
    containers(job)[-1]["resource"] = containers(job)[-1].pop("resources")  # a typo an apply would reject
    with pytest.raises(kv.ValidationError):
        kv.validate(job, VERSIONS[-1], strict=True)
