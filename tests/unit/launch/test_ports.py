"""orchestration.launch.ports: a free port is drawn below the kernel's ephemeral range (where outgoing connections take
their local ports), and is one a server can bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from orchestration.launch import ports


def test_the_range_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ports.ephemeral_range(f) == (40000, 50000)
    assert ports.ephemeral_range(tmp_path / "missing") == (32768, 60999)
    f.write_text("garbage\n")
    assert ports.ephemeral_range(f) == (32768, 60999)


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    lo, _hi = ports.ephemeral_range()
    seen = set()
    for _ in range(20):
        port = ports.free_port()
        assert 10000 <= port < lo
        with socket.socket() as s:  # free a moment ago, free now (nothing else here draws from this range)
            s.bind(("127.0.0.1", port))
        seen.add(port)
    assert len(seen) > 1  # drawn at random: two tests side by side seldom meet


def test_a_port_in_use_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    other = ports.free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports.free_port()))
        busy.listen()
        taken = busy.getsockname()[1]
        draws = iter([taken, taken, other])
        monkeypatch.setattr(ports.random.SystemRandom, "randrange", lambda self, a, b: next(draws))
        assert ports.free_port() == other
        # every draw taken: the kernel chooses, from its ephemeral range
        monkeypatch.setattr(ports.random.SystemRandom, "randrange", lambda self, a, b: taken)
        port = ports.free_port(tries=3)
        assert port != taken and port >= ports.ephemeral_range()[0]
