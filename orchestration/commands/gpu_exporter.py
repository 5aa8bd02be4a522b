"""`vllm-locust gpu-exporter --port P`: serve this host's GPUs (NVML) as Prometheus text, DCGM exporter's names.

Needs only nvidia-ml-py beside the package (`pip install 'vllm-locust[gpu]'`). Point `vllm-locust run
--gpu-metrics http://HOST:P/metrics` at it (docs/energy.md).
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from orchestration.commands import reported
from orchestration.server.nvml_exporter import NvmlReader
from vllm_users import errors

__all__ = ["main", "make_server"]

PROG = "vllm-locust gpu-exporter"


def make_server(reader: NvmlReader, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server answering GET /metrics with `reader`'s scrape (anything else: 404)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            try:
                data = reader.read().encode()
            except Exception as e:  # noqa: BLE001 - an NVML failure is the scrape's 500, the exporter stays up
                self.send_error(500, f"{type(e).__name__}: {e}"[:200])
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # a scrape every 2 s: no access log
            pass

    return ThreadingHTTPServer((host, port), Handler)


def _nvml() -> Any:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        raise errors.UsageError(
            "gpu-exporter needs nvidia-ml-py: pip install 'vllm-locust[gpu]' (or nvidia-ml-py)"
        ) from None
    return pynvml


@reported(PROG)
def main(argv: Sequence[str]) -> int:
    """Serve /metrics until Ctrl-C / SIGTERM."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--port", type=int, default=9400, help="Port to serve /metrics on (default 9400, DCGM's)")
    p.add_argument("--bind", default="0.0.0.0", help="Address to listen on (default all)")
    p.add_argument(
        "--hostname", default=socket.gethostname(), help="The Hostname label (default this host's name)"
    )
    a = p.parse_args(list(argv))
    if not 0 <= a.port <= 65535:
        raise errors.UsageError(f"--port {a.port} is not a TCP port (0-65535)")
    nvml = _nvml()
    try:
        reader = NvmlReader(nvml, a.hostname)
    except nvml.NVMLError as e:
        raise errors.UsageError(
            f"NVML could not be initialised ({e}): no NVIDIA driver on this host?"
        ) from None
    try:
        srv = make_server(reader, a.bind, a.port)
    except OSError as e:
        reader.close()
        raise errors.UsageError(f"cannot listen on {a.bind}:{a.port}: {e.strerror or e}") from None
    print(
        f"{PROG}: {len(reader.handles)} GPU(s) on http://{a.bind}:{srv.server_address[1]}/metrics", flush=True
    )
    try:
        srv.serve_forever()
    finally:
        srv.server_close()
        reader.close()
    return 0
