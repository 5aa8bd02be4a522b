"""A DCGM exporter for tests and labelled runs: one GPU whose energy counter follows the wall clock at a fixed
power, with a fixed utilisation and clock-event reasons (a profile), served on 127.0.0.1 at port 0."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Profile:
    """What the GPU reports at every scrape."""

    watts: float
    util_pct: float
    reasons: int = 0  # NVML's clock-event bitmask: 0x4 power cap, 0x40 hardware thermal


PROFILES = {
    "busy": Profile(650.0, 95.0),
    "throttled": Profile(700.0, 97.0, 0x4),
    "idle": Profile(90.0, 12.0),
}


def text(p: Profile, t: float) -> str:
    """The exporter's page at time `t`."""
    labels = 'gpu="0",UUID="GPU-0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"'
    return (
        f"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
        f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {3e9 + p.watts * 1000 * t:.3f}\n"
        f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {p.watts}\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {p.util_pct}\n"
        f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{labels}}} {p.reasons}\n"
        f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 0\n"
    )


def serve_page(page: Callable[[], str]) -> tuple[str, Callable[[], None]]:
    """Serve `page()` (called at each scrape) as /metrics; the URL and the function that stops the server."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            data = page().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    def stop() -> None:
        srv.shutdown()
        srv.server_close()

    return f"http://127.0.0.1:{srv.server_address[1]}/metrics", stop


def serve(profile: str) -> tuple[str, Callable[[], None]]:
    """Start an exporter of `profile`; its /metrics URL and the function that stops it."""
    p = PROFILES[profile]
    return serve_page(lambda: text(p, time.time()))
