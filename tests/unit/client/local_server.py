"""A gevent TCP server on 127.0.0.1 for the client tests, as a module-scoped pytest fixture."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gevent.server import StreamServer


def server_fixture(handle: Callable[[Any, Any], None]) -> Any:
    """A module-scoped fixture yielding a started StreamServer that runs `handle(sock, addr)` per connection."""

    @pytest.fixture(scope="module")
    def server() -> Iterator[StreamServer]:
        srv = StreamServer(("127.0.0.1", 0), handle)
        srv.start()
        yield srv
        srv.stop()

    return server
