"""TLS in the cluster: `k8s render` mounts the CA bundle (and a client certificate for mTLS) into the master and
worker pods and points the run's options at the mounted files; `k8s wait` checks /health with the same settings.

- `--ca-bundle FILE`: the file is copied into the kustomization (tls/ca.crt) as ConfigMap vllm-locust-ca: a CA
  certificate is public; `--ca-configmap NAME` mounts an existing ConfigMap with the key ca.crt instead (a
  trust-manager bundle, or kube-root-ca.crt for a server whose certificate the cluster's CA signed).
- `--client-tls-secret NAME`: an existing kubernetes.io/tls Secret (tls.crt, tls.key): a private key never goes
  into the rendered files, so a local --client-cert/--client-key is refused without it.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from orchestration.settings import config as C
from vllm_users.client.tls import TLSConfig, context
from vllm_users.options import Options, coerce, env_name

__all__ = ["CA_DIR", "CLIENT_DIR", "add_flags", "apply", "check", "config_tls"]

CA_DIR = "/etc/vllm-locust/ca"
CLIENT_DIR = "/etc/vllm-locust/client"
JOBS = ("vllm-locust-master", "vllm-locust-workers")  # both run the load's users: both need the files
FIELDS = ("ca_bundle", "insecure", "client_cert", "client_key")


def add_flags(p: argparse.ArgumentParser) -> None:
    """render's own TLS flags (the files come from the cluster)."""
    p.add_argument(
        "--ca-configmap",
        default="",
        metavar="NAME",
        help="Trust the CAs of this existing ConfigMap (key ca.crt) instead of copying --ca-bundle",
    )
    p.add_argument(
        "--client-tls-secret",
        default="",
        metavar="NAME",
        help="mTLS: the client certificate from this kubernetes.io/tls Secret (tls.crt, tls.key)",
    )


def check(a: Options, r: argparse.Namespace) -> None:
    """UsageError for TLS options a cluster cannot use; a --ca-bundle to copy must load (a PEM of CAs)."""
    if a.server.ca_bundle and r.ca_configmap:
        raise C.UsageError("--ca-bundle FILE or --ca-configmap NAME: give one of them")
    if (a.server.client_cert or a.server.client_key) and not r.client_tls_secret:
        raise C.UsageError(
            "--client-cert: in a cluster the certificate and its key come from a Secret: create a "
            "kubernetes.io/tls Secret and name it with --client-tls-secret NAME"
        )
    if a.server.ca_bundle:
        context(TLSConfig(ca_bundle=a.server.ca_bundle))


def apply(
    a: Options, r: argparse.Namespace, options: dict[str, Any], files: dict[str, str], kust: dict[str, Any]
) -> None:
    """Mount the TLS files into both Jobs (kust's patches), and point config.yaml's `options` at them (`check`
    passed)."""
    mounts: list[tuple[str, dict[str, Any], str]] = []  # (volume name, its source, where it is mounted)
    if a.server.ca_bundle:
        try:
            with open(a.server.ca_bundle) as fh:
                files["tls/ca.crt"] = fh.read()
        except OSError as e:
            raise C.UsageError(f"--ca-bundle {a.server.ca_bundle}: {e.strerror}") from None
        kust["configMapGenerator"].append({"name": "vllm-locust-ca", "files": ["ca.crt=tls/ca.crt"]})
    if a.server.ca_bundle or r.ca_configmap:
        mounts.append(("tls-ca", {"configMap": {"name": r.ca_configmap or "vllm-locust-ca"}}, CA_DIR))
        options["ca_bundle"] = f"{CA_DIR}/ca.crt"
    if r.client_tls_secret:
        mounts.append(("tls-client", {"secret": {"secretName": r.client_tls_secret}}, CLIENT_DIR))
        options.update(client_cert=f"{CLIENT_DIR}/tls.crt", client_key=f"{CLIENT_DIR}/tls.key")
    if not mounts:
        return
    ops: list[dict[str, Any]] = []
    for name, source, path in mounts:
        ops.append({"op": "add", "path": "/spec/template/spec/volumes/-", "value": {"name": name, **source}})
        mount = {"name": name, "mountPath": path, "readOnly": True}
        for where in ("initContainers", "containers"):  # the /health wait checks the certificate too
            ops.append({"op": "add", "path": f"/spec/template/spec/{where}/0/volumeMounts/-", "value": mount})
    for job in JOBS:
        kust.setdefault("patches", []).append(
            {"target": {"kind": "Job", "name": job}, "patch": json.dumps(ops)}
        )


def config_tls(config: str | None) -> TLSConfig:
    """The TLS settings of a run's options file and environment (env VLLM_LOCUST_CA_BUNDLE, ... win), as
    `vllm-locust run` would read them."""
    doc = C.load_config(config) if config else {}
    values: dict[str, Any] = {}
    for name in FIELDS:
        raw = os.environ.get(env_name(name), doc.get(name))
        if raw not in (None, ""):
            try:
                values[name] = coerce(name, raw)
            except (argparse.ArgumentTypeError, ValueError) as e:
                raise C.UsageError(f"option --{name.replace('_', '-')}: {e}") from None
    return TLSConfig(**values)
