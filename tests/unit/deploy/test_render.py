"""`vllm-locust k8s render` writes the user's options into manifests; `k8s wait` waits for /health."""

from __future__ import annotations

import http.server
import threading

import pytest
import yaml

from orchestration.commands.run import run_options
from orchestration.commands.worker import users_of
from orchestration.k8s import wait
from orchestration.k8s.render import main as render_main
from tests.unit.deploy.conftest import find, kustomize
from vllm_users.options import changed

IMAGE = ["--image", "registry.example.com/vllm-locust:0.1"]  # render needs the image the cluster pulls

FLAGS = [
    "--host",
    "http://vllm.llm.svc:8080",
    "--scenario",
    "chat:3,json:1",
    "--request-rate",
    "inf",
    "--max-concurrency",
    "64",
    "--num-prompts",
    "500",
    "--input-len",
    "1024",
    "--output-len",
    "256",
    "--range-ratio",
    "0.1",
    "--ignore-eos",
    "--goodput",
    "ttft:500",
    "tpot:50",
    "--run-time",
    "5m",
    "--header",
    "X-Team: perf",
]


def test_config_yaml_gives_the_master_the_same_options_as_the_flags(tmp_path, capsys) -> None:
    out = tmp_path / "k"
    assert render_main([*IMAGE, *FLAGS, "--workers", "6", "-o", str(out)]) == 0
    assert "kubectl apply -k" in capsys.readouterr().out
    from_file = changed(run_options(["--config", str(out / "config.yaml")]), config="")
    from_flags = changed(run_options(FLAGS), config="")
    assert from_file == from_flags
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert "workers" not in cfg and "output_dir" not in cfg  # the cluster layout owns those
    assert users_of(str(out / "config.yaml"))[0] == "chat:3,json:1"  # what the worker pods will run


def test_worker_count_port_image_and_namespace_land_in_the_manifests(tmp_path) -> None:
    out = tmp_path / "k"
    assert (
        render_main(
            [
                *IMAGE,
                "--host",
                "http://vllm.llm.svc:8080",
                "--workers",
                "6",
                "--image",
                "reg.io/t/vl:1.2",
                "--namespace",
                "perf",
                "--pvc",
                "50Gi",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    docs = kustomize(out)
    assert find(docs, "Job", "vllm-locust-workers")["spec"]["parallelism"] == 6
    assert find(docs, "Namespace", "perf") and {d["metadata"].get("namespace") for d in docs} == {
        None,
        "perf",
    }
    pol = find(docs, "NetworkPolicy", "vllm-locust-workers")["spec"]["egress"]
    assert pol[1]["ports"] == [{"protocol": "TCP", "port": 8080}]
    job = find(docs, "Job", "vllm-locust-master")["spec"]["template"]["spec"]
    assert {c["image"] for c in job["containers"] + job["initContainers"]} == {"reg.io/t/vl:1.2"}
    assert (
        find(docs, "PersistentVolumeClaim", "vllm-locust-results")["spec"]["resources"]["requests"]["storage"]
        == "50Gi"
    )


def test_preset_scenario_reaches_the_workers(tmp_path) -> None:
    out = tmp_path / "k"
    assert render_main([*IMAGE, "--host", "http://v:8000", "--preset", "prefix-caching", "-o", str(out)]) == 0
    assert users_of(str(out / "config.yaml"))[0] == "multi-turn"


@pytest.mark.parametrize(
    "argv, why",
    [
        ([], "--host"),
        (["--host", "http://v:8000", "--workers", "0"], "--workers 0 needs --expect-workers"),
        (["--host", "http://v:8000", "--users", "4", "--request-rate", "5"], "give one of them"),
        (["--host", "v:8000"], "expected a URL"),
        (["--host", "http://v:8000", "--master-port", "6000"], "--master-port: the manifests set it"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(tmp_path, capsys, argv, why) -> None:
    assert render_main([*IMAGE, *argv, "-o", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1 and not (tmp_path / "k").exists()


def test_render_without_an_image_is_one_line_naming_image(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The old default, vllm-locust:latest, is in no registry (and a :latest tag is always pulled): manifests that
    rendered fine left every pod in ImagePullBackOff. Asked for instead, before anything is written."""
    assert render_main(["--host", "http://v:8000", "-o", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--image: name the image your cluster pulls" in err
    assert not (tmp_path / "k").exists()


def test_the_api_key_is_never_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_LOCUST_API_KEY", "sk-secret-123")
    out = tmp_path / "k"
    assert render_main([*IMAGE, "--host", "http://v:8000", "--api-key", "sk-secret-456", "-o", str(out)]) == 0
    text = "".join(p.read_text() for p in out.rglob("*.yaml"))
    assert "sk-secret" not in text


class _Health(http.server.BaseHTTPRequestHandler):
    answers = [503, 503, 200]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_wait_polls_until_health_is_200_and_times_out_otherwise(tmp_path, capsys) -> None:
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"host: http://127.0.0.1:{srv.server_port}\n")
        assert wait.main(["--config", str(cfg), "--interval", "0.05", "--timeout", "5"]) == 0
        out = capsys.readouterr().out
        assert "HTTP 503" in out and "ready after" in out
        _Health.answers = [503]
        assert wait.main(["--config", str(cfg), "--interval", "0.05", "--timeout", "0.3"]) == 3
        assert "not ready" in capsys.readouterr().err
    finally:
        srv.shutdown()
    assert wait.main(["--host", "http://127.0.0.1:9", "--interval", "0.05", "--timeout", "0.2"]) == 3


class _GatedHealth(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        ok = (
            self.headers.get("X-Gateway-Token") == "gw-1"
            and self.headers.get("Authorization") == "Bearer k-1"
        )
        self.send_response(200 if ok else 401)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_wait_sends_the_pods_credentials(tmp_path, monkeypatch, capsys) -> None:
    srv = http.server.HTTPServer(("127.0.0.1", 0), _GatedHealth)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        argv = ["--host", f"http://127.0.0.1:{srv.server_port}", "--interval", "0.05", "--timeout", "0.3"]
        assert wait.main(argv) == 3  # without the Secrets' variables: 401
        monkeypatch.setenv("VLLM_LOCUST_HEADER", "X-Gateway-Token: gw-1")  # Secret vllm-locust-header
        monkeypatch.setenv("VLLM_LOCUST_API_KEY", "k-1")
        assert wait.main(argv) == 0
        assert "gw-1" not in capsys.readouterr().out
    finally:
        srv.shutdown()
