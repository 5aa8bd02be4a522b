"""Why the hot path reads raw bytes through geventhttpclient: ours vs requests + sseclient-py, A/B interleaved.

Both clients run in a process of their own pinned to the client core, under gevent (the way a Locust worker
runs), with STREAMS greenlets in a closed loop against the simulator in fixed mode (TTFT 50 ms, ITL 10 ms,
64 tokens: the truth is known), pinned to the other core:
- ``ours``: vllm_users.client.stream.send_and_read (one sendall, kernel-stamped reads, byte search per chunk);
- ``sseclient``: requests (a Session per greenlet, stream=True) + sseclient-py's SSEClient, json.loads per
  event: what the design first named.
Reported per run: TTFT error (measured − 50 ms) p50/p99, ITL p50 error, and streamed tokens per client
CPU-second (getrusage of the client process). Runs alternate ours/sseclient REPS times (the box is noisy).

    pip install sseclient-py requests   # not dependencies of vllm-locust
    python benchmarks/bench_sse_readers.py [--reps 3] [--seconds 8] [--streams 64]

``--parser [--other ROOT]``: the SSE dispatcher alone (client.stream._Events), no sockets: CPU per event of vLLM's
compact events (one read per event, as they arrive), this checkout against another one's (interleaved rounds),
and this checkout on the same events re-serialized the way a proxy writes them (json.dumps' spacing, gzip).
``--parser --instructions [--streams 64]``: the same, counted in instructions per event under valgrind (callgrind),
which a loaded machine does not disturb.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

OUTPUT_LEN = 64


def _client(kind: str, url: str, streams: int, seconds: float) -> dict[str, Any]:
    """The client side (run in its own process): closed loop for `seconds`, timings and CPU."""
    from gevent import monkey

    monkey.patch_all()
    import resource
    import time

    import gevent

    host, port = url.rsplit("//", 1)[1].split(":")
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "hello " * 32}],
        "max_tokens": OUTPUT_LEN,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    raw = json.dumps(body).encode()
    ttft: list[float] = []
    itl: list[float] = []
    tokens = 0
    deadline = time.perf_counter() + seconds

    if kind == "ours":
        from geventhttpclient import HTTPClient

        from vllm_users.client.stream import send_and_read

        def loop() -> None:
            nonlocal tokens
            client = HTTPClient(host, int(port), concurrency=1, network_timeout=30)
            headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
            while time.perf_counter() < deadline:
                res = send_and_read(
                    client,
                    "/v1/chat/completions",
                    raw,
                    headers,
                )
                if res.error is None and res.chunk_times:
                    c = res.chunk_times
                    ttft.append(c[0] - res.t0)
                    itl.extend(b - a for a, b in zip(c, c[1:], strict=False))
                    tokens += (res.usage or {}).get("completion_tokens") or len(c)
    else:
        import requests
        import sseclient

        def loop() -> None:
            nonlocal tokens
            session = requests.Session()
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                resp = session.post(
                    url + "/v1/chat/completions",
                    data=raw,
                    stream=True,
                    headers={"Content-Type": "application/json"},
                )
                times: list[float] = []
                n = 0
                for event in sseclient.SSEClient(resp).events():
                    if event.data == "[DONE]":
                        break
                    doc = json.loads(event.data)
                    ch = doc.get("choices") or []
                    if ch and ch[0].get("delta", {}).get("content"):
                        times.append(time.perf_counter())
                    if doc.get("usage"):
                        n = doc["usage"].get("completion_tokens") or 0
                resp.close()
                if times:
                    ttft.append(times[0] - t0)
                    itl.extend(b - a for a, b in zip(times, times[1:], strict=False))
                    tokens += n or len(times)

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    gevent.joinall([gevent.spawn(loop) for _ in range(streams)])
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"ttft_s": ttft, "itl_s": itl, "tokens": tokens, "cpu_s": cpu, "requests": len(ttft)}


def _vllm_events(n: int, spaced: bool) -> list[bytes]:
    """One chat stream as vLLM 0.32 writes it (role, n content events, finish, usage, [DONE]), one bytes per event."""
    head = {
        "id": "chatcmpl-0123456789abcdef",
        "object": "chat.completion.chunk",
        "created": 1764000000,
        "model": "sim-model",
    }

    def choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {
            **head,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "token_ids": None}
            ],
        }

    docs = [choice({"role": "assistant", "content": ""}, None)]
    docs += [choice({"content": f" word{i}"}, "length" if i == n - 1 else None) for i in range(n)]
    docs.append(
        {
            **head,
            "choices": [],
            "usage": {"prompt_tokens": 32, "total_tokens": 32 + n, "completion_tokens": n},
        }
    )
    dump = json.dumps if spaced else (lambda d: json.dumps(d, separators=(",", ":")))
    return [b"data: " + dump(d).encode() + b"\n\n" for d in docs] + [b"data: [DONE]\n\n"]


def _gzipped(events: list[bytes]) -> list[bytes]:
    import zlib

    z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [z.compress(e) + z.flush(zlib.Z_SYNC_FLUSH) for e in events]
    out[-1] += z.flush()
    return out


def _parse_round(mod: Any, events: list[bytes], streams: int, encoding: str = "") -> float:
    """CPU ns per event of `streams` streams of `events` through mod._Events (one feed per event)."""
    import time

    t = time.process_time()
    for _ in range(streams):
        res = mod.StreamResult(t0=0.0)
        sink = ev = mod.SseEvents(res, "chat", False)
        if encoding:
            sink = mod.F.Decoded(ev, mod.F.decoder(encoding))
        for i, e in enumerate(events):
            sink.feed(e, float(i))
        sink.finish(float(len(events)))
        assert res.error is None and res.usage and res.finish_reason == "length", (
            res.error,
            res.finish_reason,
        )
    return (time.process_time() - t) / (streams * len(events)) * 1e9


def _load_stream(root: str) -> Any:
    """client.stream of the checkout at `root` (fresh module objects)."""
    import importlib

    for m in [k for k in sys.modules if k.startswith("vllm_users")]:
        del sys.modules[m]
    sys.path.insert(0, root)
    try:
        return importlib.import_module("vllm_users.client.stream")
    finally:
        sys.path.remove(root)


def _cases(mods: dict[str, Any]) -> dict[str, Any]:
    compact, spaced = _vllm_events(OUTPUT_LEN, False), _vllm_events(OUTPUT_LEN, True)
    cases: dict[str, Any] = {f"{k} compact": (m, compact, "") for k, m in mods.items()}
    cases["this spaced (json.dumps)"] = (mods["this"], spaced, "")
    if hasattr(mods["this"], "F"):
        cases["this compact gzip"] = (mods["this"], _gzipped(compact), "gzip")
        cases["this spaced gzip"] = (mods["this"], _gzipped(spaced), "gzip")
    return cases


def _instructions(root: str, case: str, streams: int) -> int:
    """Instructions (valgrind's callgrind count) of one process that feeds `streams` streams of `case`."""
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        os.path.abspath(__file__),
        "--parser-one",
        root,
        "--case",
        case,
        "--streams",
        str(streams),
    ]
    err = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800).stderr
    return int(next(ln for ln in err.splitlines() if "Collected" in ln).split(":")[-1].strip())


def parser_instructions(other: str, streams: int, cases: tuple[str, ...]) -> None:
    """--parser --instructions: instructions per event, with the interpreter's start and imports subtracted (a run
    of 0 streams): independent of the machine's load, unlike CPU time on a shared box."""
    this = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = [("this", this, c) for c in cases]
    if other:
        runs.insert(1, ("other", other, "compact"))
    print(f"SSE dispatcher under callgrind, {OUTPUT_LEN + 3} events per stream, {streams} streams:")
    base = {
        root: _instructions(root, "compact", 0) for root in {r[1] for r in runs}
    }  # start, imports, rendering
    for name, root, case in runs:
        n = (_instructions(root, case, streams) - base[root]) / (streams * (OUTPUT_LEN + 3))
        print(f"| {name} {case:14s} | {n:8.0f} instructions/event |", flush=True)


def _parser_one(root: str, case: str, streams: int) -> None:
    mod = _load_stream(root)
    events = _vllm_events(OUTPUT_LEN, case.startswith("spaced"))
    enc = "gzip" if case.endswith("gzip") else ""
    events = _gzipped(events) if enc else events
    if streams:
        _parse_round(mod, events, streams, enc)


def parser_bench(other: str, rounds: int, streams: int) -> None:
    """--parser: ns per event, medians of interleaved rounds."""
    import statistics

    mods = {"this": _load_stream(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    if other:
        mods["other"] = _load_stream(other)
    cases = _cases(mods)
    got: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for k, (m, evs, enc) in cases.items():
            got[k].append(_parse_round(m, evs, streams, enc))
    print(
        f"SSE dispatcher, {OUTPUT_LEN + 3} events per stream, {streams} streams x {rounds} interleaved rounds:"
    )
    for k, v in got.items():
        print(f"| {k:28s} | {statistics.median(v):7.0f} ns/event (min {min(v):.0f}, max {max(v):.0f}) |")


def _pctl(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def main(argv: list[str] | None = None) -> int:
    """Alternate ours / sseclient runs against one fixed-mode simulator; print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument(
        "--parser", action="store_true", help="the SSE dispatcher alone, CPU per event (no sockets)"
    )
    ap.add_argument("--other", default="", help="--parser: another checkout's root to compare (e.g. main's)")
    ap.add_argument("--rounds", type=int, default=7, help="--parser: interleaved rounds")
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="--parser: count instructions per event under valgrind instead of timing (a loaded box)",
    )
    ap.add_argument(
        "--cases",
        default="compact,spaced,compact-gzip,spaced-gzip",
        help="--parser --instructions: this checkout's cases",
    )
    ap.add_argument("--parser-one", default="", help=argparse.SUPPRESS)  # internal: one case, under valgrind
    ap.add_argument("--case", default="compact", help=argparse.SUPPRESS)
    ap.add_argument("--client", default="", help=argparse.SUPPRESS)  # internal: run one client
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.parser_one:
        _parser_one(a.parser_one, a.case, a.streams)
        return 0
    if a.parser and a.instructions:
        parser_instructions(a.other, a.streams, tuple(a.cases.split(",")))
        return 0
    if a.parser:
        parser_bench(a.other, a.rounds, a.streams * 16)
        return 0
    if a.client:
        print(json.dumps(_client(a.client, a.url, a.streams, a.seconds)))
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import CLIENT_CPU, ITL_MS, PIN, TTFT_MS, start_sim

    rows = []
    with start_sim(ITL_MS, TTFT_MS) as sim:
        for rep in range(a.reps):
            for kind in ("ours", "sseclient"):
                cmd = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--client",
                    kind,
                    "--url",
                    sim.url,
                    "--streams",
                    str(a.streams),
                    "--seconds",
                    str(a.seconds),
                ]
                if PIN:
                    cmd = ["taskset", "-c", str(CLIENT_CPU), *cmd]
                out = subprocess.run(
                    cmd, capture_output=True, text=True, check=True, timeout=a.seconds * 10 + 60
                )
                d = json.loads(out.stdout.strip().splitlines()[-1])
                row = {
                    "rep": rep,
                    "client": kind,
                    "requests": d["requests"],
                    "ttft_err_p50_ms": _pctl(d["ttft_s"], 50) * 1e3 - TTFT_MS,
                    "ttft_err_p99_ms": _pctl(d["ttft_s"], 99) * 1e3 - TTFT_MS,
                    "itl_p50_ms": _pctl(d["itl_s"], 50) * 1e3,
                    "tok_per_cpu_s": d["tokens"] / d["cpu_s"] if d["cpu_s"] else float("nan"),
                    "tok_s": d["tokens"] / a.seconds,
                }
                rows.append(row)
                print(
                    "  ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                    flush=True,
                )
    print(
        f"\nsimulator --fixed TTFT {TTFT_MS} ms ITL {ITL_MS} ms, {OUTPUT_LEN} tokens, {a.streams} streams, "
        f"{a.seconds} s per run, pinned={PIN}; medians over {a.reps} interleaved reps:"
    )
    for kind in ("ours", "sseclient"):
        mine = [r for r in rows if r["client"] == kind]
        med = {k: sorted(r[k] for r in mine)[len(mine) // 2] for k in mine[0] if k not in ("rep", "client")}
        print(f"| {kind} | " + " | ".join(f"{k} {v:.1f}" for k, v in med.items()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
