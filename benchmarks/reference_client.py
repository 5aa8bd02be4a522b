"""The raw-socket reference client: the timing floor the benchmarks compare our client against.

asyncio protocol, no HTTP library and no JSON: each SSE event that carries output is timestamped when the
bytes arrive; runs in its own process pinned to the client core (common.CLIENT_CPU).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from common import CLIENT_CPU, NCPU

from vllm_users.client.chunks import is_chat_output

_TERM = b"\r\n0\r\n\r\n"


class _Ref(asyncio.Protocol):
    """Timestamps output-carrying SSE events as bytes arrive; no HTTP library, one recv per data_received."""

    def __init__(self) -> None:
        self.done: asyncio.Future[None] | None = None
        self.times: list[float] = []
        self.tail = b""
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        buf = self.tail + data
        parts = buf.split(b"\n\n")
        self.tail = parts.pop()
        for p in parts:
            j = p.find(b"data: ")
            if j >= 0 and is_chat_output(p[j + 6 :]):
                self.times.append(now)
        if buf.endswith(_TERM) and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("closed"))


async def _reference(
    host: str, port: int, streams: int, duration: float, output_len: int, input_words: int
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    body = json.dumps(
        {
            "model": "sim-model",
            "messages": [{"role": "user", "content": " ".join(["hi"] * input_words)}],
            "max_tokens": output_len,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    req = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: text/event-stream\r\nAccept-Encoding: identity\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
    )
    ttft: list[float] = []
    itl: list[float] = []
    stop_at = loop.time() + duration
    errors = 0

    async def one() -> None:
        nonlocal errors
        tr, pr = await loop.create_connection(_Ref, host, port)
        while loop.time() < stop_at:
            pr.done, pr.times, pr.tail = loop.create_future(), [], b""
            t0 = time.perf_counter()
            tr.write(req)
            try:
                await pr.done
            except ConnectionError:
                errors += 1
                return
            if pr.times:
                ttft.append((pr.times[0] - t0) * 1000.0)
                itl.extend((b - a) * 1000.0 for a, b in zip(pr.times, pr.times[1:], strict=False))
        tr.close()

    c0 = time.process_time()
    await asyncio.gather(*(one() for _ in range(streams)))
    return {"ttft": ttft, "itl": itl, "errors": errors, "cpu_s": time.process_time() - c0}


def _ref_main(
    host: str, port: int, streams: int, duration: float, output_len: int, input_words: int, out_path: str
) -> None:
    if NCPU > 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {CLIENT_CPU})
    res = asyncio.run(_reference(host, port, streams, duration, output_len, input_words))
    Path(out_path).write_text(json.dumps(res))


def run_reference(
    url: str, streams: int, duration: float, output_len: int = 64, input_words: int = 32
) -> dict[str, Any]:
    """The raw-socket reference client at ``streams`` concurrency, in its own process pinned to the client core."""
    import multiprocessing as mp
    import tempfile

    host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    p = mp.get_context("spawn").Process(
        target=_ref_main, args=(host, int(port), streams, duration, output_len, input_words, path)
    )
    p.start()
    p.join(duration + 120)
    data = json.loads(Path(path).read_text())
    os.unlink(path)
    return data
