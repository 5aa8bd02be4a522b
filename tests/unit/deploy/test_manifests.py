"""docker/: the Kubernetes manifests render offline and agree with each other and with the CLI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestration import config as C
from orchestration.run_cmd import add_run_parser

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "docker" / "k8s"


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    if not shutil.which("kubectl"):
        pytest.skip("kubectl not installed")
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _job(docs: list[dict], name: str) -> dict:
    return next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == name)


def test_worker_count_and_scenario_match_the_master(docs) -> None:
    master = _job(docs, "vllm-locust-master")["spec"]["template"]["spec"]["containers"][0]
    workers = _job(docs, "vllm-locust-workers")
    margs = master["args"]
    expect = int(margs[margs.index("--expect-workers") + 1])
    assert workers["spec"]["parallelism"] == workers["spec"]["completions"] == expect
    wargs = workers["spec"]["template"]["spec"]["containers"][0]["args"]
    cfg = yaml.safe_load((K8S / "config.yaml").read_text())
    assert wargs[wargs.index("--scenario") + 1] == cfg["scenario"]
    svc = next(d for d in docs if d["kind"] == "Service")
    assert wargs[wargs.index("--master-host") + 1] == svc["metadata"]["name"]
    assert str(svc["spec"]["ports"][0]["port"]) == margs[margs.index("--master-port") + 1]


def test_api_key_only_from_a_secret(docs) -> None:
    for name in ("vllm-locust-master", "vllm-locust-workers"):
        env = _job(docs, name)["spec"]["template"]["spec"]["containers"][0]["env"]
        key = next(e for e in env if e["name"] == "VLLM_LOCUST_API_KEY")
        assert "secretKeyRef" in key["valueFrom"] and "value" not in key
    assert "api_key" not in yaml.safe_load((K8S / "config.yaml").read_text())


def test_config_file_is_valid_for_vllm_locust_run() -> None:
    parser = C.OneLineParser(prog="t")
    run_parser = add_run_parser(parser.add_subparsers())
    C.apply_defaults(run_parser, ["--config", str(K8S / "config.yaml")])  # raises UsageError when invalid
    args = run_parser.parse_args([])
    assert args.request_rate == 20 and args.ignore_eos is True and args.goodput == ["ttft:1000", "tpot:100"]


def test_dockerfile_copies_what_exists() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (.+) \S+$", text, flags=re.M):
        for path in src.split():
            assert os.path.exists(ROOT / path), path
