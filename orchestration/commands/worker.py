"""`vllm-locust worker`: join a master on another host (the load then comes from many machines)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from orchestration.commands import reported
from orchestration.settings import config as C
from vllm_users import run_dir as R
from vllm_users.options import WORKER
from vllm_users.scenarios.registry import locustfile_source

__all__ = ["main", "users_of"]


def users_of(config: str) -> tuple[str | None, str | None]:
    """(--scenario, -f) of a master started with `--config CONFIG` (its preset's scenario when the file names none)."""
    from orchestration.commands.run import run_options

    o = run_options(["--config", config])  # its preset included
    return o.scenario.scenario or None, o.scenario.locustfile or None


@reported("vllm-locust worker")
def main(argv: Sequence[str]) -> int:
    """Start `--processes` Locust workers for `--scenario` / `-f`, connected to `--master-host`."""
    p = C.OneLineParser(prog="vllm-locust worker")
    C.add_options(p, WORKER, defaults={"master_port": 5557})
    from orchestration.commands.run import resolve_users

    a = C.parse_options(p, list(argv), WORKER)
    if not a.processes.master_host:
        p.error("the following arguments are required: --master-host")
    scenario, locustfile = users_of(a.source.config) if a.source.config else (None, None)
    mix, files = resolve_users(a.scenario.scenario or scenario, a.scenario.locustfile or locustfile)
    d = tempfile.mkdtemp(prefix="vllm-locust-worker-")
    lf = R.path(d, R.LOCUSTFILE)
    with open(lf, "w") as fh:
        fh.write(locustfile_source(mix, files))
    env = dict(os.environ, PYTHONUNBUFFERED="1", VLLM_LOCUST_WORKER_DIR=os.path.join(d, "records"))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                lf,
                "--worker",
                "--master-host",
                a.processes.master_host,
                "--master-port",
                str(a.processes.master_port),
            ],
            env=env,
        )
        for _ in range(a.processes.processes)
    ]
    print(
        f"vllm-locust worker: {a.processes.processes} process(es) -> {a.processes.master_host}:{a.processes.master_port}; records in {d}/records"
    )
    try:
        return max(p.wait() for p in procs)
    except KeyboardInterrupt:  # reported as INTERRUPTED once the workers are told to stop
        for pr in procs:
            pr.terminate()
        raise
