"""The vllm-locust image, built for real with podman from a local Debian base (no registry is reachable).

Everything lives under the test cache (~/.cache/vllm-locust/k8s or $VLLM_LOCUST_CACHE/k8s), flock-protected:
  base-bookworm.tar   debootstrap'd Debian bookworm with python3 + python3-venv (built once, ~1.5 min)
  wheels-<hash>/      the image's dependencies as wheels, keyed by pyproject's dependencies (pip wheel, once)
  podman/             podman's storage (vfs, --root/--runroot here, so nothing touches the host's)
Each test session builds the image from docker/Dockerfile (`podman build --isolation=chroot`), with
BASE=localhost/vllm-locust-base:bookworm and pip installing from the wheelhouse.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[3]
BASE_IMAGE = "localhost/vllm-locust-base:bookworm"
IMAGE = "localhost/vllm-locust:test"
MIRROR = os.environ.get("VLLM_LOCUST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
IMAGE_PYTHON = (3, 11)  # Debian bookworm's python3: the wheelhouse is built by a host python of this version
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cache_dir() -> Path:
    """$VLLM_LOCUST_CACHE/k8s, else ~/.cache/vllm-locust/k8s."""
    base = os.environ.get("VLLM_LOCUST_CACHE") or str(Path.home() / ".cache" / "vllm-locust")
    return Path(base) / "k8s"


def missing_tools() -> str:
    """'' when this machine can build and run the image, else one line saying why not."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, podman's vfs storage, chroot and ip netns)"
    lacking = [t for t in ("podman", "debootstrap", "ip", "unshare", "chroot") if not shutil.which(t)]
    if lacking:
        return f"{', '.join(lacking)} not installed (scripts/test.sh installs podman and debootstrap as root)"
    if sys.version_info[:2] != IMAGE_PYTHON:
        return f"the wheelhouse needs a host python {IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]} like the image's (bookworm)"
    return ""


@dataclass
class Timings:
    """Seconds each build step took in this session (0 when it came from the cache)."""

    base: float = 0.0
    wheels: float = 0.0
    image: float = 0.0
    steps: dict[str, str] = field(default_factory=dict)


def podman(*args: str, check: bool = True, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    """podman with its storage under the cache (vfs: no overlay or fuse needed)."""
    store = cache_dir() / "podman"
    cmd = [
        "podman",
        "--root",
        str(store / "root"),
        "--runroot",
        str(store / "run"),
        "--storage-driver",
        "vfs",
        *args,
    ]
    return subprocess.run(cmd, check=check, timeout=timeout, capture_output=True, text=True, **kw)


@contextmanager
def _locked() -> Iterator[None]:
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _base_tar(t: Timings) -> Path:
    tar = cache_dir() / "base-bookworm.tar"
    if tar.exists():
        t.steps["base"] = "cached"
        return tar
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                str(rootfs),
                MIRROR,
            ],
            check=True,
            capture_output=True,
            timeout=1200,
        )
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        shutil.rmtree(rootfs / "var" / "lib" / "apt" / "lists", ignore_errors=True)
        part = tar.with_suffix(".part")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(part), "."], check=True, timeout=600)
        part.rename(tar)
    t.base = time.monotonic() - t0
    t.steps["base"] = f"debootstrap {t.base:.0f} s"
    return tar


def _wheelhouse(t: Timings) -> Path:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # the image's dependencies only: the package's and its `gpu` extra's (gpu-exporter, docker/Dockerfile)
    deps = [*project["dependencies"], *project["optional-dependencies"]["gpu"]]
    key = hashlib.sha256(json.dumps(sorted(deps)).encode()).hexdigest()[:12]
    wheels = cache_dir() / f"wheels-{key}"
    if (wheels / ".complete").exists():
        t.steps["wheels"] = "cached"
        return wheels
    t0 = time.monotonic()
    shutil.rmtree(wheels, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run(
        [*pip, "wheel", "--wheel-dir", str(wheels), f"{ROOT}[gpu]"],
        check=True,
        capture_output=True,
        timeout=900,
    )
    subprocess.run(
        [*pip, "download", "-d", str(wheels), "setuptools>=77", "wheel"],
        check=True,
        capture_output=True,
        timeout=300,
    )  # the image builds vllm-locust itself: its build backend, offline
    for own in wheels.glob("vllm_locust-*.whl"):
        own.unlink()  # the image installs the checkout's source, never a cached build of it
    (wheels / ".complete").touch()
    for old in cache_dir().glob("wheels-*"):
        if old != wheels:
            shutil.rmtree(old, ignore_errors=True)  # another pyproject.toml's: not needed again
    t.wheels = time.monotonic() - t0
    t.steps["wheels"] = f"pip wheel {t.wheels:.0f} s"
    return wheels


def build(t: Timings) -> str:
    """Build IMAGE from docker/Dockerfile on the local base; returns the image's mounted root filesystem."""
    with _locked():
        tar = _base_tar(t)
        if podman("image", "exists", BASE_IMAGE, check=False).returncode != 0:
            podman("import", "--change", f"ENV={PATH_ENV}", str(tar), BASE_IMAGE)
        wheels = _wheelhouse(t)
        t0 = time.monotonic()
        res = podman(
            "build",
            "--isolation=chroot",
            "--layers=false",
            "-f",
            str(ROOT / "docker" / "Dockerfile"),
            "-t",
            IMAGE,
            "--build-arg",
            f"BASE={BASE_IMAGE}",
            "--build-arg",
            "PIP_INSTALL_ARGS=--no-index --find-links /wheels",
            "-v",
            f"{wheels}:/wheels:ro",
            str(ROOT),
            check=False,
            timeout=1200,
        )
        t.image = time.monotonic() - t0
        t.steps["image"] = f"podman build {t.image:.0f} s"
        if res.returncode != 0:
            raise RuntimeError(
                f"podman build failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
            )
        podman("image", "prune", "-f", check=False)  # the previous build's image, now untagged
        return podman("image", "mount", IMAGE).stdout.strip()


def image_config() -> dict:
    """The built image's config: Env, Entrypoint, Cmd, User, WorkingDir."""
    return json.loads(podman("image", "inspect", IMAGE, "--format", "{{json .Config}}").stdout)
