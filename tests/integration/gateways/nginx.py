"""nginx as a gateway in front of a local server, for the gateway tests and benchmarks/bench_tls.py: its own
config in a temporary folder, one process (no daemon, no privilege drop), on free ports a TLS listener, a plain one
and, given a client CA, an mTLS one (a client certificate signed by that CA required), all proxying (unbuffered,
keep-alive upstream) to 127.0.0.1:UPSTREAM."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestration.launch.ports import free_port
from tests.integration.gateways.procs import stop

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


@dataclass(frozen=True)
class Gateway:
    """The running nginx: https://127.0.0.1:tls_port, http://127.0.0.1:plain_port, https://127.0.0.1:mtls_port."""

    tls_port: int
    plain_port: int
    pid: int
    mtls_port: int | None = None

    @property
    def mtls(self) -> str:
        """The listener that asks for a client certificate (start_nginx's client_ca)."""
        assert self.mtls_port is not None
        return f"https://127.0.0.1:{self.mtls_port}"

    @property
    def https(self) -> str:
        """The TLS listener's URL."""
        return f"https://127.0.0.1:{self.tls_port}"

    @property
    def http(self) -> str:
        """The plain listener's URL (the same proxy without TLS)."""
        return f"http://127.0.0.1:{self.plain_port}"


def _conf(
    tmp: Path, ports: tuple[int, int, int], upstream: int, cert: Path, key: Path, client_ca: Path | None
) -> Path:
    tls_port, plain_port, mtls_port = ports
    location = """
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 60s;
    }"""
    mtls = (
        f"""
  server {{
    listen 127.0.0.1:{mtls_port} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_client_certificate {client_ca};
    ssl_verify_client on;
    keepalive_requests 100000;{location}
  }}"""
        if client_ca
        else ""
    )
    temps = "\n".join(
        f"  {k}_temp_path {tmp / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = tmp / "nginx.conf"
    conf.write_text(f"""
daemon off;
master_process off;
worker_processes 1;
pid {tmp / "nginx.pid"};
error_log {tmp / "error.log"} warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
{temps}
  upstream backend {{ server 127.0.0.1:{upstream}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{tls_port} ssl;
    listen 127.0.0.1:{plain_port};
    ssl_certificate {cert};
    ssl_certificate_key {key};
    keepalive_requests 100000;{location}
  }}{mtls}
}}
""")
    return conf


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


@contextmanager
def start_nginx(
    tmp: Path, upstream: int, cert: Path, key: Path, cpu: int | None = None, client_ca: Path | None = None
) -> Iterator[Gateway]:
    """nginx proxying to 127.0.0.1:`upstream` (pinned to `cpu` when given; an mTLS listener with `client_ca`);
    stopped on exit. RuntimeError when it does not start (nginx missing: check NGINX first)."""
    if NGINX is None:
        raise RuntimeError("nginx is not installed (apt-get install -y nginx)")
    tmp.mkdir(parents=True, exist_ok=True)
    err = ""
    for _attempt in range(3):  # a free port may be taken between our probe and nginx's bind: other ones then
        ports = (free_port(), free_port(), free_port())
        cmd = [NGINX, "-c", str(_conf(tmp, ports, upstream, cert, key, client_ca)), "-p", str(tmp)]
        if cpu is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", str(cpu), *cmd]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            if all(_listening(p) for p in ports[: 3 if client_ca else 2]):
                break
            time.sleep(0.05)
        if proc.poll() is None:
            break
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    else:
        raise RuntimeError(f"nginx did not start: {err.strip()}")
    try:
        yield Gateway(ports[0], ports[1], proc.pid, ports[2] if client_ca else None)
    finally:
        stop(proc)
        if proc.stderr:
            proc.stderr.close()
