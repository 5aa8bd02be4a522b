"""`vllm-locust k8s render|wait`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from vllm_users import exit_codes

USAGE = "usage: vllm-locust k8s {render,wait} ...  (render: manifests for your run; wait: the pods' readiness wait)"


def main(argv: Sequence[str]) -> int:
    """Dispatch `vllm-locust k8s render` and `vllm-locust k8s wait`."""
    argv = list(argv)
    if argv and argv[0] == "render":
        from orchestration.k8s.render import main as render_main

        return render_main(argv[1:])
    if argv and argv[0] == "wait":
        from orchestration.k8s.wait import main as wait_main

        return wait_main(argv[1:])
    print(USAGE, file=sys.stderr if argv[:1] not in (["-h"], ["--help"]) else sys.stdout)
    return 0 if argv[:1] in (["-h"], ["--help"]) else exit_codes.USAGE
