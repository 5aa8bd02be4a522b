"""`vllm-locust k8s render|wait`: Kubernetes manifests for a run (orchestration.k8s.render) and the pods'
readiness wait (orchestration.k8s.wait)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from vllm_users import exit_codes

__all__ = ["SUBCOMMANDS", "USAGE", "main"]

SUBCOMMANDS = {
    "render": "orchestration.k8s.render",
    "wait": "orchestration.k8s.wait",
}  # name -> module with main
USAGE = "usage: vllm-locust k8s {render,wait} ...  (render: manifests for your run; wait: the pods' readiness wait)"


def main(argv: Sequence[str]) -> int:
    """Dispatch `vllm-locust k8s render` and `vllm-locust k8s wait` (their own mains report their errors)."""
    argv = list(argv)
    if argv and argv[0] in SUBCOMMANDS:
        return int(importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv[1:]))
    asked = argv[:1] in (["-h"], ["--help"])
    print(USAGE, file=sys.stdout if asked else sys.stderr)
    return 0 if asked else exit_codes.USAGE
