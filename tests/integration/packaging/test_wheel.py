"""The wheel and the sdist: `python -m build` makes both, `twine check` passes, they hold every file of the
packages (the LLM tab's script, py.typed, the Kubernetes manifests, the locustfiles), and the wheel installed
into a fresh venv outside the checkout runs the main job from there.

The fresh venv gets no copy of the third-party dependencies (that would need the network and minutes): it sees
only the distributions that vllm-locust's `Requires-Dist` names, and theirs, linked from this venv into a
folder of their own, so a dependency missing from pyproject.toml fails here as it would for a user.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.timeout(420)

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("vllm_users", "orchestration", "vllm_sim", "locustfiles")
# what a run needs beside the .py files, named so that a glob that misses them fails by name
MUST_SHIP = [
    "vllm_users/distributed/views/static/llm_tab.js",
    "vllm_users/py.typed",
    "orchestration/py.typed",
    "vllm_sim/py.typed",
    "orchestration/k8s/manifests/base/kustomization.yaml",
    "orchestration/k8s/manifests/pvc/pvc.yaml",
    "locustfiles/chat.py",
    "locustfiles/json.py",
    "locustfiles/examples/minimal.py",
]


def _source_files() -> list[str]:
    """The packages' files in the checkout (tracked or not ignored), relative to the root."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *PACKAGES],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # no git (an unpacked sdist): every file on disk
        out = [
            p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*") if p.is_file()
        ]
    return sorted(
        f for f in out if "__pycache__" not in f and not f.endswith(".pyc") and (ROOT / f).is_file()
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, and the wheel built from it (as `python -m build` does), in a temporary folder."""
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend of this venv, so the test needs no network
    p = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    sdists, wheels = glob.glob(str(out / "*.tar.gz")), glob.glob(str(out / "*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, os.listdir(out)
    return {"sdist": Path(sdists[0]), "wheel": Path(wheels[0]), "dir": out}


def test_twine_check(dist: dict[str, Path]) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist["sdist"]), str(dist["wheel"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("PASSED") == 2, p.stdout


def test_metadata_is_complete(dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as z:
        names = z.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = z.read(meta_name).decode()
        assert any(re.search(r"\.dist-info/licenses/LICENSE$", n) for n in names), names
        entry_points = z.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    assert "vllm-locust = orchestration.cli:main" in entry_points
    headers = meta.split("\n\n", 1)[0]
    assert re.search(r"^License-Expression: Apache-2\.0$", headers, re.M), headers
    assert re.search(r"^Description-Content-Type: text/markdown", headers, re.M), headers
    assert re.search(r"^Requires-Python: >=3\.10$", headers, re.M), headers
    classifiers = re.findall(r"^Classifier: (.+)$", headers, re.M)
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.11" in classifiers, (
        classifiers
    )
    assert any(c.startswith("Topic :: ") for c in classifiers) and any(
        c.startswith("Development Status") for c in classifiers
    )
    trove = pytest.importorskip("trove_classifiers")  # PyPI refuses an upload with an unknown classifier
    assert not [c for c in classifiers if c not in trove.classifiers], classifiers
    assert "# vllm-locust" in meta.split("\n\n", 1)[1]  # the README is the long description


def test_wheel_and_sdist_hold_every_package_file(dist: dict[str, Path]) -> None:
    expected = _source_files()
    assert set(MUST_SHIP) <= set(expected), "the checkout lacks a file this test names"
    with zipfile.ZipFile(dist["wheel"]) as z:
        in_wheel = set(z.namelist())
    with tarfile.open(dist["sdist"]) as t:
        top = t.getnames()[0].split("/")[0]
        in_sdist = {n.partition("/")[2] for n in t.getnames()}
    assert not [f for f in expected if f not in in_wheel], "missing from the wheel"
    assert not [f for f in expected + ["LICENSE", "README.md", "pyproject.toml"] if f not in in_sdist], top
    # and nothing of the checkout beyond the packages (no tests, benchmark results or run directories)
    strays = sorted(n for n in in_wheel if not n.startswith(PACKAGES) and ".dist-info/" not in n)
    assert not strays, strays


def _requires_dist(wheel: Path) -> list[Requirement]:
    """The wheel's own Requires-Dist lines (not this venv's editable install's, which may be older)."""
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [Requirement(r) for r in re.findall(r"^Requires-Dist: (.+)$", meta.split("\n\n", 1)[0], re.M)]


def _dependency_closure(wheel: Path) -> list[metadata.Distribution]:
    """The wheel's dependencies and theirs, as installed in this venv (extras nobody asked for skipped)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [r for r in _requires_dist(wheel) if not r.marker or r.marker.evaluate({"extra": ""})]
    while todo:
        req = todo.pop()
        key = re.sub(r"[-_.]+", "-", req.name).lower() + str(sorted(req.extras))
        if key in seen:
            continue
        seen[key] = d = metadata.distribution(req.name)
        extras = ["", *sorted(req.extras)]
        for sub in map(Requirement, d.requires or []):
            if not sub.marker or any(sub.marker.evaluate({"extra": e}) for e in extras):
                todo.append(sub)
    return list(seen.values())


def _link_dependencies(wheel: Path, into: Path) -> None:
    """Symlink each top-level file or folder of the dependency closure's distributions into `into`."""
    into.mkdir()
    for d in _dependency_closure(wheel):
        site = Path(str(d.locate_file("")))
        for f in d.files or []:
            parts = Path(str(f)).parts
            if not parts or parts[0] == ".." or parts[0].endswith(".pth"):
                continue
            link = into / parts[0]
            if not link.exists() and (site / parts[0]).exists():
                link.symlink_to(site / parts[0])


@pytest.fixture(scope="module")
def venv(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel installed (no deps from the index: see the docstring)."""
    base = tmp_path_factory.mktemp("wheel-venv")
    assert ROOT not in base.parents
    env = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    py = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    _link_dependencies(dist["wheel"], base / "deps")
    (site / "_vllm_locust_test_deps.pth").write_text(str(base / "deps") + "\n")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(dist["wheel"]),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return env


def _env(venv: Path) -> dict[str, str]:
    """This environment without the checkout: no PYTHONPATH, no VIRTUAL_ENV, no VLLM_LOCUST_* settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("VLLM_LOCUST_")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_installed_wheel_imports_from_the_venv(venv: Path, tmp_path: Path) -> None:
    code = (
        "import json, sys, importlib.resources as r, vllm_users, orchestration, vllm_sim, locustfiles;"
        "print(json.dumps({'files': [m.__file__ for m in (vllm_users, orchestration, vllm_sim, locustfiles)],"
        "'path': sys.path, 'js': r.files('vllm_users.distributed.views').joinpath('static/llm_tab.js').is_file(),"
        "'dir': locustfiles.DIR}))"
    )
    p = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=tmp_path,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert all(Path(f).resolve().is_relative_to(venv.resolve()) for f in got["files"]), got["files"]
    assert not [e for e in got["path"] if e and Path(e).resolve() == ROOT], got["path"]
    assert got["js"], "the LLM tab's script is not in the installed package"
    # `python -m locustfiles` prints the folder, for `locust -f "$(python -m locustfiles)/chat.py"`
    p = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "locustfiles"],
        cwd=tmp_path,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and p.stdout.strip() == got["dir"], p.stderr
    # the installed locustfiles import (json.py puts the standard library's json back; minimal.py is a custom user)
    files = [str(Path(got["dir"]) / f) for f in ("chat.py", "json.py", "examples/minimal.py")]
    p = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "vllm_users.scenarios.loader",
            *sum([["-f", f] for f in files], []),
        ],
        cwd=tmp_path,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(u in p.stdout for u in ("ChatUser", "JsonUser", "HaikuUser")), p.stdout


def test_installed_wheel_runs_the_main_job(venv: Path, tmp_path: Path) -> None:
    p = subprocess.run(
        [str(venv / "bin" / "vllm-locust"), "run", "--workers", "2", "--num-prompts", "50"],
        cwd=tmp_path,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    runs = glob.glob(str(tmp_path / "results" / "*-chat"))
    assert len(runs) == 1, os.listdir(tmp_path)
    run = Path(runs[0])
    result = json.loads((run / "result.json").read_text())
    assert result["completed"] == 50 and result["failed"] == 0, result
    assert re.search(r"^Successful requests:\s+50\b", p.stdout, re.M) and "TTFT" in p.stdout, (
        p.stdout
    )  # the summary
    html = (run / "report" / "report.html").read_text()
    assert "<html" in html and "Run health" in html
