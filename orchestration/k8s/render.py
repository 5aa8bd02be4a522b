"""`vllm-locust k8s render`: a kustomization holding the user's run options, so nobody edits YAML by hand.

The options are `vllm-locust run`'s own (one parser, orchestration.commands.run.new_run_parser); they land in
config.yaml, the file the master and the workers read, so the same file drives a local `vllm-locust run --config`
too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from orchestration.commands import reported
from orchestration.commands.run import new_run_parser, validate
from orchestration.k8s import tls as k8s_tls
from orchestration.settings import config as C
from vllm_users.client.endpoints import host_urls
from vllm_users.options import DEFAULTS, RUN, Options, changed, table
from vllm_users.options import value as option_value
from vllm_users.redact import is_secret_header, redact_url

__all__ = [
    "CLUSTER_OWNED",
    "MANIFESTS",
    "METRICS_PORT",
    "NO_IMAGE",
    "main",
    "render",
    "render_parser",
    "run_config",
    "target_ports",
    "write",
]

MANIFESTS = Path(__file__).with_name("manifests")
# `run` options the cluster layout decides (master.yaml's flags) or that must not land in a ConfigMap: left out
# of config.yaml (a local options file may hold output_dir or quiet; the pods use their own)
CLUSTER_OWNED = frozenset(
    {
        "config",
        "workers",
        "expect_workers",
        "master_bind_host",
        "master_port",
        "output_dir",
        "run_name",
        "web_ui",
        "web_port",
        "quiet",
        "sim_args",
        "output_file",
        "print_result",
        "api_key",
        "prometheus_port",
    }
)
WIRING = frozenset(
    {"expect_workers", "master_bind_host", "master_port"}
)  # refused: they would break the pods'
RENDER_ONLY = frozenset({"out", "image", "namespace", "pvc", "ca_configmap", "client_tls_secret"})
DEFAULT_WORKERS = 4
# the master's /metrics port in base/ (its annotations, env VLLM_LOCUST_PROMETHEUS_PORT, container and Service
# port, NetworkPolicy vllm-locust-master-metrics); --prometheus-port replaces it in those files
METRICS_PORT = 9409
METRICS_FILES = ("base/master.yaml", "base/networkpolicy.yaml")


def render_parser() -> argparse.ArgumentParser:
    """`run`'s parser plus the cluster's own flags."""
    p = new_run_parser("vllm-locust k8s render")
    p.description = "Write a kustomization for this run: kubectl apply -k DIR"
    for action in p._actions:
        if action.dest == "workers":
            action.help = (
                f"Worker pods, one core each; the master waits for all of them (default {DEFAULT_WORKERS})"
            )
    p.add_argument(
        "-o", "--out", default="vllm-locust-k8s", help="Directory to write (default ./vllm-locust-k8s)"
    )
    p.add_argument(
        "--image",
        default="",
        help="The image with vllm-locust (docker/Dockerfile) that the cluster pulls, e.g. "
        "registry.example.com/vllm-locust:0.1 (required)",
    )
    p.add_argument(
        "--namespace", default="vllm-locust", help="Namespace of the Jobs (created by the manifests)"
    )
    p.add_argument(
        "--pvc", default="", metavar="SIZE", help="Keep results on a PersistentVolumeClaim, e.g. 5Gi"
    )
    k8s_tls.add_flags(p)
    return p


def run_config(o: Options) -> dict[str, Any]:
    """The options that differ from `run`'s defaults, as config.yaml holds them (option names)."""
    out: dict[str, Any] = {}
    for name, _spec, default in table(RUN):
        value = option_value(o, name)
        if name in CLUSTER_OWNED or value == default:
            continue
        if isinstance(value, float):
            value = "inf" if math.isinf(value) else (int(value) if value.is_integer() else value)
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def refuse_credentials(o: Options) -> None:
    """UsageError when an option would put a credential into config.yaml (a ConfigMap, readable by anyone who
    can read the namespace): a URL's userinfo, or an auth-like --header / --metrics-header."""
    for name in ("host", "server_metrics", "gpu_metrics"):
        given = option_value(o, name)
        for url in (given,) if isinstance(given, str) else given:  # --server-metrics: repeatable
            if url and redact_url(url) != url:
                raise C.UsageError(
                    f"--{name.replace('_', '-')}: its user:password would land in the ConfigMap "
                    f"config.yaml; give the URL without it and the credential as {SECRET_HINT}"
                )
    for name in ("header", "metrics_header"):
        for item in option_value(o, name):
            key, _, value = item.partition(":")
            if is_secret_header(key, value.strip()):
                raise C.UsageError(
                    f"--{name.replace('_', '-')} '{key.strip()}: ...' carries a credential, which "
                    f"would land in the ConfigMap config.yaml; give it as {SECRET_HINT}"
                )


NO_IMAGE = (
    "--image: name the image your cluster pulls, built from docker/Dockerfile and pushed (e.g. --image "
    "registry.example.com/vllm-locust:0.1; a kind cluster: kind load docker-image and that tag)"
)
SECRET_HINT = (
    "the API key (Secret vllm-locust-api-key, key api-key) or the header (Secret vllm-locust-header, key "
    "header: 'NAME: VALUE'; docs/kubernetes.md)"
)


def _image(ref: str) -> tuple[str, str]:
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return name, tag


def render(given: Options, a: Options, r: argparse.Namespace) -> dict[str, str]:
    """File name -> text of the kustomization for these options (`given`: what the user set, the preset by name;
    `a`: the options the master will have) and render's own arguments `r`; UsageError when they cannot run in a
    cluster."""
    if not a.server.host:
        raise C.UsageError("--host: the cluster needs the target server's URL, e.g. http://vllm.default:8000")
    if (
        not r.image
    ):  # no registry serves a default name: the pods would sit in ImagePullBackOff, far from the cause
        raise C.UsageError(NO_IMAGE)
    owned = [d for d in sorted(WIRING) if option_value(a, d) != DEFAULTS[d]]
    if owned:
        raise C.UsageError(
            f"--{owned[0].replace('_', '-')}: the manifests set it (master.yaml); leave it out"
        )
    workers = DEFAULT_WORKERS if a.processes.workers is None else a.processes.workers
    if workers < 1:
        raise C.UsageError(f"--workers {workers}: a cluster run needs at least one worker pod")
    k8s_tls.check(a, r)  # the TLS files come from the cluster: those paths are checked in the pods, not here
    pod = changed(a, workers=workers, ca_bundle="", client_cert="", client_key="")
    validate(pod)  # the master would refuse these options in its pod: refuse them now
    refuse_credentials(given)
    hosts = host_urls(a.server.host)  # a fleet: one URL a replica (UsageError naming a bad one)
    # the master also scrapes each --gpu-metrics exporter (a gpu-exporter sidecar's port, DCGM's 9400)
    host_ports = target_ports(hosts, ())
    ports = target_ports(hosts, (*a.scrape.server_metrics, *a.gpu.gpu_metrics))
    options = run_config(given)
    if "host" in options and len(hosts) > 1:
        options["host"] = ",".join(hosts)  # an @FILE is read here: the pods do not have it
    files = {str(f.relative_to(MANIFESTS)): f.read_text() for f in sorted(MANIFESTS.rglob("*.yaml"))}
    if a.prometheus.prometheus_port == 5557 or (a.prometheus.prometheus_port or 0) > 65535:
        raise C.UsageError(
            f"--prometheus-port {a.prometheus.prometheus_port}: not a port the master pod can serve (5557 is Locust's)"
        )
    if a.prometheus.prometheus_port and a.prometheus.prometheus_port != METRICS_PORT:
        for rel in METRICS_FILES:
            files[rel] = re.sub(rf"\b{METRICS_PORT}\b", str(a.prometheus.prometheus_port), files[rel])
    if not r.pvc:
        files = {k: v for k, v in files.items() if not k.startswith("pvc/")}
    header = (
        "# vllm-locust run options, written by `vllm-locust k8s render`; the same file works locally:\n"
        "#   vllm-locust run --config config.yaml\n"
        "# The API key is not here: Secret vllm-locust-api-key (key api-key) -> env VLLM_LOCUST_API_KEY;\n"
        "# nor a gateway's header: Secret vllm-locust-header (key header) -> env VLLM_LOCUST_HEADER.\n"
    )
    name, tag = _image(r.image)
    kust: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": r.namespace,
        "resources": ["base"],
        "components": ["workers"] + (["pvc"] if r.pvc else []),
        "configMapGenerator": [
            {"name": "vllm-locust-config", "files": ["config.yaml"]},
            {"name": "vllm-locust-run", "literals": [f"workers={workers}", f"target-port={ports[0]}"]},
        ],
        "generatorOptions": {"disableNameSuffixHash": True},
        "images": [{"name": "vllm-locust", "newName": name, "newTag": tag}],
    }
    if r.namespace != "vllm-locust":
        kust["patches"] = [_rename_namespace(r.namespace)]
    kust.setdefault("patches", []).extend(_more_target_ports(host_ports, ports))
    if not kust["patches"]:
        del kust["patches"]
    k8s_tls.apply(a, r, options, files, kust)  # the CA bundle / client certificate mounted in both Jobs
    files["config.yaml"] = header + yaml.safe_dump(options, sort_keys=False, default_flow_style=None)
    if r.pvc:
        kust.setdefault("patches", []).append(
            {
                "target": {"kind": "PersistentVolumeClaim", "name": "vllm-locust-results"},
                "patch": f'[{{"op": "replace", "path": "/spec/resources/requests/storage", "value": "{r.pvc}"}}]',
            }
        )
    files["kustomization.yaml"] = (
        f"# kubectl apply -k {r.out}    ({workers} worker pods against {', '.join(hosts)})\n"
        + yaml.safe_dump(kust, sort_keys=False)
    )
    return files


def target_ports(hosts: Sequence[str], metrics: Sequence[str]) -> list[int]:
    """Every port the pods reach out to, the first host's first: the hosts' (a fleet's replicas may differ) and
    the --server-metrics URLs' (a replica's /metrics, past the router), each once."""
    ports: list[int] = []
    for url in [*hosts, *metrics]:
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise C.UsageError(
                f"--server-metrics {redact_url(url)!r}: expected a URL like http://vllm-0.vllm:8000/metrics"
            ) from None
        if port not in ports:
            ports.append(port)
    return ports


def _more_target_ports(hosts: Sequence[int], every: Sequence[int]) -> list[dict[str, Any]]:
    """Patches adding ports to the NetworkPolicies' target rule beyond the first (the component sets that one):
    the workers send the load (`hosts`' ports); the master runs the preflight against every host and scrapes
    every /metrics (`every` port)."""
    out = []
    for name, rule, ports in (("vllm-locust-master", 0, every), ("vllm-locust-workers", 1, hosts)):
        path = f"/spec/egress/{rule}/ports/-"
        ops = [{"op": "add", "path": path, "value": {"protocol": "TCP", "port": p}} for p in ports[1:]]
        if ops:
            out.append({"target": {"kind": "NetworkPolicy", "name": name}, "patch": json.dumps(ops)})
    return out


def _rename_namespace(namespace: str) -> dict[str, Any]:
    patch = f'[{{"op": "replace", "path": "/metadata/name", "value": "{namespace}"}}]'
    return {"target": {"kind": "Namespace", "name": "vllm-locust"}, "patch": patch}


def write(out: str, files: dict[str, str]) -> None:
    """Write the files under `out`, replacing the directories render owns (base/, workers/, pvc/, tls/)."""
    for sub in ("base", "workers", "pvc", "tls"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    for rel, text in files.items():
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)


@reported("vllm-locust k8s render")
def main(argv: Sequence[str]) -> int:
    """Parse `run`'s options plus the cluster's, write the kustomization, say how to apply it."""
    by_layer, r = C.layers(render_parser(), list(argv), RUN)
    given = C.merge({k: v for k, v in by_layer.items() if k != "preset"})  # the master applies the preset
    files = render(given, C.merge(by_layer), r)
    write(r.out, files)
    print(
        f"vllm-locust k8s render: wrote {r.out}/ ({len(files)} files). Next:\n"
        f"  kubectl apply -k {r.out}\n"
        f"  kubectl -n {r.namespace} logs -f job/vllm-locust-master    # ends with VLLM_LOCUST_RESULT {{json}}"
    )
    return 0
