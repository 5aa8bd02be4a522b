"""HAProxy (Debian package `haproxy`) as a round-robin router in front of local servers, for the gateway tests:
its own config in a temporary folder, one process in the foreground (`-db`), on a free port, balancing every
request over 127.0.0.1:BACKEND (named s0, s1, ... in order), with extra backend lines (`http-response ...`,
`option ...`) where a test wants them."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from orchestration.launch.ports import free_port
from tests.integration.gateways.procs import stop, wait_listening

# /usr/sbin is not on every PATH a test runs under
HAPROXY = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if os.path.exists(p)), None)
MISSING = "haproxy is not installed (apt-get install -y haproxy)"


def config(port: int, backends: Sequence[int], backend_lines: Sequence[str] = ()) -> str:
    """haproxy.cfg: a frontend on 127.0.0.1:`port`, round-robin over `backends` (servers s0, s1, ...), with
    `backend_lines` added to the backend as given. `option http-no-delay`, as docs/fleets.md tells users: without
    it HAProxy corks a stream's small writes and a short answer arrives in one read (delivered at once)."""
    servers = "\n".join(f"    server s{i} 127.0.0.1:{p}" for i, p in enumerate(backends))
    rules = "".join(f"    {line}\n" for line in backend_lines)
    return f"""global
    maxconn 512
defaults
    mode http
    option http-no-delay
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend fe
    bind 127.0.0.1:{port}
    default_backend be
backend be
    balance roundrobin
{rules}{servers}
"""


@contextmanager
def haproxy(tmp_path: str, backends: Sequence[int], backend_lines: Sequence[str] = ()) -> Iterator[str]:
    """HAProxy on a free port in front of `backends`; its URL. A port taken in between is retried; the process
    is stopped by its PID on exit."""
    assert HAPROXY is not None, MISSING
    for _attempt in range(3):
        port = free_port()
        cfg = os.path.join(tmp_path, "haproxy.cfg")
        with open(cfg, "w") as fh:
            fh.write(config(port, backends, backend_lines))
        proc = subprocess.Popen(
            [HAPROXY, "-db", "-f", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            wait_listening(port, proc, "haproxy")
        except RuntimeError:
            proc.kill()
            proc.wait(5)
            continue
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(proc)
        return
    raise RuntimeError("haproxy did not start (3 tries)")
