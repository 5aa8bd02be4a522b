"""Process entry point: parse flags, pick the event loop, listen, print SIM_READY, stop on signals."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from .config import SimConfig, parse_config
from .server import SimServer


def _new_loop(cfg: SimConfig) -> asyncio.AbstractEventLoop:
    """A uvloop loop when importable (and not disabled), else the stdlib one."""
    if not cfg.no_uvloop:
        try:
            import uvloop  # type: ignore[import-not-found, unused-ignore]

            return uvloop.new_event_loop()  # type: ignore[no-any-return]
        except ImportError:
            pass
    return asyncio.new_event_loop()


async def _serve(cfg: SimConfig) -> None:
    """Listen until SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    server = SimServer(cfg)
    port = await server.listen()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    host = cfg.host if cfg.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    sys.stdout.write(f"SIM_READY http://{host}:{port}\n")
    sys.stdout.flush()
    await stop.wait()
    await server.close()


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM/SIGINT; return the process exit code."""
    cfg = parse_config(argv)
    logging.basicConfig(
        level=getattr(logging, cfg.log_level.upper(), logging.WARNING),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    loop = _new_loop(cfg)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_serve(cfg))
    except OSError as e:
        sys.stderr.write(f"sim: cannot listen on {cfg.host}:{cfg.port}: {e}\n")
        return 2
    finally:
        loop.close()
    return 0
