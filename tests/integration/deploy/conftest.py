"""The image tier: build docker/Dockerfile with podman once per session (skips loudly when it cannot)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator

import pytest

from tests.integration.deploy import image


@pytest.fixture(scope="session")
def built_image() -> Iterator[tuple[str, dict, image.Timings]]:
    """(mounted root filesystem, image config, build timings) of the freshly built vllm-locust image."""
    why = (
        "VLLM_LOCUST_SKIP_IMAGE=1" if os.environ.get("VLLM_LOCUST_SKIP_IMAGE") in ("1", "true", "yes") else ""
    )
    why = why or image.missing_tools()
    if why:
        pytest.skip(f"image tier skipped: {why}")
    timings = image.Timings()
    root = image.build(timings)
    (image.cache_dir() / "timings.json").write_text(json.dumps(vars(timings), indent=1))
    print(f"\nimage tier: {timings.steps}")
    yield root, image.image_config(), timings
    image.podman("image", "unmount", image.IMAGE, check=False)


@pytest.fixture(scope="session")
def kubectl() -> str:
    """kubectl (client only: `kubectl kustomize`), or a loud skip."""
    path = shutil.which("kubectl")
    if not path:
        pytest.skip(
            "kubectl not installed: the manifests cannot be rendered with kustomize (see scripts/test.sh)"
        )
    return path
