"""The rendered Jobs' containers, run from the built image against the simulator: the image, the manifests'
commands, env, users, volumes and the Service name agree (docs/kubernetes.md).

`vllm-locust k8s render` -> `kubectl kustomize` -> the master Job's and the worker Job's pod specs, each pod
in its own network namespace (tests/integration/deploy/pods.py), the simulator in another as the target.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from orchestration.launch.launcher import RESULT_LINE_PREFIX
from tests.integration.deploy.pods import Network, Pod, pod_spec

pytestmark = [pytest.mark.podman, pytest.mark.timeout(1800)]

NUM_PROMPTS = 60
WORKERS = 2
TARGET = "vllm.default.svc.cluster.local"
API_KEY = "k8s-test-key"


def _render(kubectl: str, out: str) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "k8s",
        "render",
        "--host",
        f"http://{TARGET}:8000",
        "--workers",
        str(WORKERS),
        "--num-prompts",
        str(NUM_PROMPTS),
        "--request-rate",
        "inf",
        "--max-concurrency",
        "16",
        "--input-len",
        "32",
        "--output-len",
        "16",
        "--ignore-eos",
        "--image",
        "localhost/vllm-locust:test",  # the pods here run from the built image's root, not a pull
        "-o",
        out,
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    text = subprocess.run([kubectl, "kustomize", out], check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def test_rendered_jobs_run_from_the_image(built_image, kubectl, tmp_path) -> None:
    """~1.5-3 min: most of it is the image build (podman on a debootstrapped Debian base, cached after the first
    run) that the rendered master and worker Jobs then run from, as pods in network namespaces."""
    image_root, image_cfg, timings = built_image
    docs = _render(kubectl, str(tmp_path / "manifests"))
    jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
    configmaps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    secrets = {
        "vllm-locust-api-key": {"api-key": API_KEY}
    }  # kubectl create secret generic ... --from-literal
    workers_job = jobs["vllm-locust-workers"]
    assert workers_job["spec"]["parallelism"] == WORKERS
    net = Network(uuid.uuid4().hex[:4], "10.213.9")
    pods: list[Pod] = []
    sim = None
    try:
        net.up()
        target_ip = net.add("target")
        master_ip = net.add("master")
        hosts = f"{target_ip} {TARGET}\n{master_ip} vllm-locust-master vllm-locust-master.vllm-locust.svc.cluster.local\n"
        sim = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                net.netns("target"),
                sys.executable,
                "-m",
                "orchestration.cli",
                "sim",
                "--host",
                target_ip,
                "--port",
                "8000",
                "--fixed",
                "--ttft-ms",
                "10",
                "--itl-ms",
                "2",
                "--api-key",
                API_KEY,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

        def pod(job: str, name: str, ip: str) -> Pod:
            return Pod(
                name,
                pod_spec(jobs[job]),
                net.netns(name),
                ip,
                tmp_path / name,
                image_root,
                image_cfg,
                hosts,
                configmaps,
                secrets,
            )

        pods.append(pod("vllm-locust-master", "master", master_ip))
        for i in range(WORKERS):
            pods.append(pod("vllm-locust-workers", f"w{i}", net.add(f"w{i}")))
        t0 = time.monotonic()
        with ThreadPoolExecutor(len(pods)) as pool:
            codes = list(pool.map(lambda p: p.run(timeout=600), pods))
        wall = time.monotonic() - t0
        logs = {p.name: p.output() for p in pods}
        master_log = pods[0].output("master")
        print(f"\npods ran in {wall:.1f} s (build: {timings.steps}); exit codes {codes}")
        (tmp_path.parent / "pod-run-seconds.txt").write_text(f"{wall:.1f}\n")
        assert codes == [0] * len(pods), logs
    finally:
        for p in pods:
            p.kill()
        if sim is not None:
            sim.kill()
        net.down()
    for name, text in logs.items():
        assert "Traceback" not in text, (name, text[-3000:])
        assert "ready after" in text, (
            name,
            text[-2000:],
        )  # the initContainer waited for the target's /health
    result_path = pods[0].volumes["results"] / "k8s-run" / "result.json"
    result = json.loads(result_path.read_text())
    assert result["completed"] == NUM_PROMPTS and result["failed"] == 0, result
    assert result["total_output_tokens"] == NUM_PROMPTS * 16
    # the result leaves the cluster through the master's log: the last line, the same JSON
    last = [line for line in master_log.splitlines() if line.startswith(RESULT_LINE_PREFIX)]
    assert len(last) == 1 and master_log.rstrip().endswith(last[0])
    printed = json.loads(last[0][len(RESULT_LINE_PREFIX) :])
    assert (
        printed["completed"] == result["completed"]
        and printed["output_throughput"] == result["output_throughput"]
    )
    assert API_KEY not in logs["master"] and API_KEY not in result_path.read_text()
    seen = result["client_health"][
        "workers"
    ]  # every worker pod reported, named HOSTNAME-wINDEX (hostname = pod)
    assert sorted(k.rsplit("-w", 1)[0] for k in seen) == [f"w{i}" for i in range(WORKERS)], seen
