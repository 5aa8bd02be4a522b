"""Render the kustomizations under docker/k8s with kubectl (skipped loudly without it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "docker" / "k8s"
OVERLAYS = ["default", "small", "large", "pvc", "fleet"]


def kustomize(path: Path | str) -> list[dict]:
    """`kubectl kustomize PATH`, parsed."""
    if not shutil.which("kubectl"):
        pytest.skip(
            "kubectl not installed: manifests not rendered (scripts/test.sh tries apt-get install kubectl)"
        )
    out = subprocess.run(
        ["kubectl", "kustomize", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request) -> tuple[str, list[dict]]:
    """(name, rendered documents) of each overlay under docker/k8s/overlays."""
    return request.param, kustomize(K8S / "overlays" / request.param)


def find(docs: list[dict], kind: str, name: str) -> dict:
    """The one document of this kind and name."""
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def containers(job: dict) -> list[dict]:
    """A Job's init containers and containers."""
    spec = job["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]
