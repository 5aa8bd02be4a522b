"""Simulator capacity: streamed tokens/s on one core with 256 streams, and emit lateness at half that load.

The simulator runs pinned to one core (``taskset -c 0``); the load client is a separate process pinned
to the other core: raw asyncio sockets, keep-alive, no JSON parsing (it counts SSE event terminators),
so the client is not what limits the figure. Lateness comes from the simulator's own
``sim:emit_lateness_seconds`` histogram (scheduled vs actual write time).

    python benchmarks/bench_simulator.py --output benchmarks/results/simulator.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vllm_sim import probe  # noqa: E402
from vllm_sim.launch import start_simulator  # noqa: E402

TERMINATOR = b"\r\n0\r\n\r\n"
EVENT_END = b"\n\n\r\n"


TOTAL = [0]  # SSE events received by all connections of this process, as they arrive


class _Reader(asyncio.Protocol):
    """Counts SSE events of the current response; signals when its chunked body ends."""

    def __init__(self) -> None:
        self.done: asyncio.Future[int] | None = None
        self.events = 0
        self.tail = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        joined = self.tail + data
        n = joined.count(EVENT_END) - self.tail.count(EVENT_END)
        self.events += n
        TOTAL[0] += n
        self.tail = joined[-16:]
        if joined.endswith(TERMINATOR) and self.done is not None and not self.done.done():
            self.done.set_result(self.events)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("closed"))


async def _client(
    host: str, port: int, streams: int, duration: float, max_tokens: int, out: dict[str, Any]
) -> None:
    """``streams`` closed-loop keep-alive connections, each streaming completions back to back."""
    loop = asyncio.get_running_loop()
    body = json.dumps(
        {
            "model": "sim-model",
            "prompt": "hello",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    req = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Accept-Encoding: identity\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    tokens = 0
    requests = 0
    errors = 0
    stop_at = loop.time() + duration
    warm = min(2.0, duration / 4)  # skip the ramp-up
    window: dict[str, float] = {}

    async def sample() -> None:
        await asyncio.sleep(warm)
        window["t0"], window["n0"] = loop.time(), TOTAL[0]
        await asyncio.sleep(max(0.5, duration - warm - 0.5))
        window["t1"], window["n1"] = loop.time(), TOTAL[0]

    async def one() -> None:
        nonlocal tokens, requests, errors
        tr, pr = await loop.create_connection(_Reader, host, port)
        while loop.time() < stop_at:
            pr.done = loop.create_future()
            pr.events = 0
            pr.tail = b""
            tr.write(req)
            try:
                n = await pr.done
            except ConnectionError:
                errors += 1
                return
            toks = n - 1  # minus [DONE]
            tokens += toks
            requests += 1
        tr.close()

    t0 = time.perf_counter()
    c0 = time.process_time()
    await asyncio.gather(sample(), *(one() for _ in range(streams)))
    out.update(
        tokens=tokens,
        requests=requests,
        errors=errors,
        wall_s=time.perf_counter() - t0,
        client_cpu_s=time.process_time() - c0,
        measured_tokens=window["n1"] - window["n0"],
        measured_s=window["t1"] - window["t0"],
    )


def _client_proc(host: str, port: int, streams: int, duration: float, max_tokens: int, q: Any) -> None:
    """Run the load client in its own process (pinned by the parent)."""
    out: dict[str, Any] = {}
    asyncio.run(_client(host, port, streams, duration, max_tokens, out))
    q.put(out)


def _cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sim_pid(launcher_pid: int) -> int:
    """The python process under taskset (taskset execs, so it is the same pid)."""
    return launcher_pid


def run_phase(streams: int, itl_ms: float, duration: float, max_tokens: int, pin: bool) -> dict[str, Any]:
    """One load level against a fresh simulator; returns client and server figures."""
    args = ["--fixed", "--ttft-ms", "1", "--itl-ms", str(itl_ms), "--max-num-seqs", str(streams * 2)]
    ncpu = os.cpu_count() or 1
    with start_simulator(args, cpu=0 if pin and ncpu > 1 else None) as sim:
        pid = _sim_pid(sim.pid)
        cpu0 = _cpu_seconds(pid)
        q: Any = mp.Queue()
        p = mp.Process(target=_client_proc, args=("127.0.0.1", sim.port, streams, duration, max_tokens, q))
        p.start()
        if pin and ncpu > 1 and p.pid is not None:
            subprocess.run(["taskset", "-pc", "1", str(p.pid)], capture_output=True, check=False)
        client = q.get(timeout=duration + 60)
        p.join(10)
        server_cpu = _cpu_seconds(pid) - cpu0
        try:
            stats = probe.request(sim.url, "/sim/stats").json()
        except OSError:
            sys.stderr.write(sim.stderr_text()[-3000:])
            raise
    offered = streams * 1000.0 / itl_ms
    # the counted events include one [DONE] per request
    achieved = client["measured_tokens"] / client["measured_s"] * max_tokens / (max_tokens + 1)
    return {
        "streams": streams,
        "itl_ms": itl_ms,
        "offered_tok_s": offered,
        "achieved_tok_s": achieved,
        "requests": client["requests"],
        "errors": client["errors"],
        "server_cpu_util": server_cpu / client["wall_s"],
        "client_cpu_util": client["client_cpu_s"] / client["wall_s"],
        "server_tok_per_cpu_s": client["tokens"] / server_cpu if server_cpu else None,
        "lateness_p50_ms": stats["lateness_s"]["p50"] * 1000,
        "lateness_p99_ms": stats["lateness_s"]["p99"] * 1000,
        "lateness_mean_ms": stats["lateness_s"]["mean"] * 1000,
        "lateness_max_ms": stats["lateness_s"]["max"] * 1000,
        "writes": stats["lateness_s"]["count"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the capacity and half-load phases, print a table, write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument(
        "--capacity-itl-ms",
        type=float,
        default=2.0,
        help="ITL of the capacity phase (offered load = streams/ITL, above capacity)",
    )
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--output", default="benchmarks/results/simulator.json")
    a = ap.parse_args(argv)
    cap = run_phase(a.streams, a.capacity_itl_ms, a.duration, a.max_tokens, not a.no_pin)
    half_itl = round(a.streams * 1000.0 / (cap["achieved_tok_s"] / 2), 3)
    half = run_phase(a.streams, half_itl, a.duration, a.max_tokens, not a.no_pin)
    rows = [("capacity", cap), ("half load", half)]
    cols = [
        "streams",
        "itl_ms",
        "offered_tok_s",
        "achieved_tok_s",
        "server_cpu_util",
        "client_cpu_util",
        "lateness_p50_ms",
        "lateness_p99_ms",
        "lateness_max_ms",
        "errors",
    ]
    print("phase      " + " ".join(f"{c:>16}" for c in cols))
    for name, r in rows:
        print(
            f"{name:<10} "
            + " ".join(f"{r[c]:>16.2f}" if isinstance(r[c], float) else f"{r[c]:>16}" for c in cols)
        )
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "pinned": not a.no_pin,
        "capacity": cap,
        "half_load": half,
    }
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
