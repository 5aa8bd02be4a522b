"""A free TCP port for a server that binds it a moment later (the master's, or a test's).

A port that `bind(0)` hands out comes from the kernel's ephemeral range, the same range every outgoing connection
takes its local port from: on a host where load is running (workers, or tests side by side) one of those
connections can take the port before its server binds it. Ports are therefore drawn below that range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["ephemeral_range", "free_port"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000  # below this, well-known services (and other tools' defaults) are more likely


def ephemeral_range(path: Path = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        lo, hi = (int(x) for x in path.read_text().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", tries: int = 64) -> int:
    """A TCP port on `host` that was free a moment ago, drawn at random below the ephemeral range."""
    lo, _hi = ephemeral_range()
    rng = random.SystemRandom()
    if lo - _LOWEST >= 1000:
        for _ in range(tries):
            port = rng.randrange(_LOWEST, lo)
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a narrow or odd range: the kernel's choice
        s.bind((host, 0))
        return int(s.getsockname()[1])
