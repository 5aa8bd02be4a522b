"""The floor client for real-server benchmarks: the least a client can add to TTFT and TPOT.

A closed loop at `--concurrency` streams over `--num-prompts` chat requests, split over `--procs` processes.
Each process runs one asyncio loop; each stream keeps one HTTP/1.1 connection and writes prebuilt request
bytes: no HTTP library, and no JSON on the hot path (an output event is found by a byte search, its time read
in `data_received` as the bytes arrive; the usage event is parsed once, at the end of a request). Prompts are
random token ids of the tokenizer decoded to text, `vllm bench serve`'s random dataset, built before the clock
starts. Every process starts its streams at one agreed wall time, so the load begins as one wave, as a
`vllm bench serve --max-concurrency c` run's does.

    python benchmarks/floor_client.py --host http://127.0.0.1:8000 --model rand --tokenizer /tmp/model \
        --concurrency 1024 --num-prompts 4096 --procs 8 --input-len 128 --output-len 128 --out floor.json

Writes one JSON: per request (send wall time, TTFT s, TPOT s, output tokens), errors, and each process's CPU
seconds. Never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from vllm_users.client.chunks import is_chat_output  # the one definition of an output event (vLLM bench's)

_TERM = b"\r\n0\r\n\r\n"  # the last chunk of a chunked body


class _Stream(asyncio.Protocol):
    """One connection: output-event times of the current response, read as bytes arrive."""

    def __init__(self) -> None:
        self.done: asyncio.Future[None] | None = None
        self.times: list[float] = []
        self.last_event = b""
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
            if j < 0:
                continue
            ev = p[j + 6 :]
            if is_chat_output(ev):
                self.times.append(now)
            elif ev[:1] == b"{":
                self.last_event = ev  # the usage event comes last, before [DONE]
        if buf.endswith(_TERM) and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("closed"))


def _request(host: str, model: str, prompt: str, output_len: int) -> bytes:
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": output_len,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
        b"Accept: text/event-stream\r\nAccept-Encoding: identity\r\nContent-Length: %d\r\n\r\n%s"
        % (host.encode(), len(body), body)
    )


async def _run(addr: tuple[str, int], requests: list[bytes], streams: int, start_at: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    rows: list[list[float]] = []
    errors: list[str] = []
    it = iter(range(len(requests)))
    conns = [await loop.create_connection(_Stream, *addr) for _ in range(streams)]
    await asyncio.sleep(max(0.0, start_at - time.time()))
    c0 = time.process_time()

    async def stream(tr: Any, pr: _Stream) -> None:
        for i in it:
            pr.done, pr.times, pr.tail, pr.last_event = loop.create_future(), [], b"", b""
            wall, t0 = time.time(), time.perf_counter()
            tr.write(requests[i])
            try:
                await pr.done
            except ConnectionError as e:
                errors.append(str(e))
                return
            if not pr.times:
                errors.append("no output")
                continue
            try:
                tokens = int(json.loads(pr.last_event)["usage"]["completion_tokens"])
            except (ValueError, KeyError, TypeError):
                tokens = len(pr.times)
            tpot = (pr.times[-1] - pr.times[0]) / (tokens - 1) if tokens > 1 else float("nan")
            rows.append([wall, pr.times[0] - t0, tpot, float(tokens), pr.times[-1] - t0])
        tr.close()

    await asyncio.gather(*(stream(tr, pr) for tr, pr in conns))
    return {"rows": rows, "errors": errors, "cpu_s": time.process_time() - c0}


def _proc(addr: tuple[str, int], requests: list[bytes], streams: int, start_at: float, path: str) -> None:
    Path(path).write_text(json.dumps(asyncio.run(_run(addr, requests, streams, start_at))))


def _prompts(tokenizer: str, input_len: int, n: int, seed: int) -> list[str]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    special = set(tok.all_special_ids)
    vocab = [i for i in range(tok.vocab_size) if i not in special]
    rng = random.Random(seed)
    return [tok.decode([rng.choice(vocab) for _ in range(input_len)]) for _ in range(n)]


def run(a: argparse.Namespace) -> dict[str, Any]:
    """The whole load over `a.procs` processes; the per-request rows, errors and CPU."""
    hostport = a.host.split("//", 1)[1].rstrip("/")
    host, port = hostport.rsplit(":", 1)
    prompts = _prompts(a.tokenizer, a.input_len, a.num_prompts, a.seed)
    reqs = [_request(hostport, a.model, p, a.output_len) for p in prompts]
    procs, paths = [], []
    start_at = time.time() + 3.0 + 0.002 * a.concurrency  # every process connected first
    ctx = mp.get_context("fork")
    for k in range(a.procs):
        share = reqs[k :: a.procs]
        streams = len(range(k, a.concurrency, a.procs))
        path = f"{a.out}.part{k}"
        paths.append(path)
        p = ctx.Process(target=_proc, args=((host, int(port)), share, streams, start_at, path))
        p.start()
        procs.append(p)
    for p in procs:
        p.join(a.timeout)
    t_end = time.time()
    rows: list[list[float]] = []
    errors: list[str] = []
    cpu = []
    for path in paths:
        if not os.path.exists(path):
            errors.append(f"{path}: no output")
            continue
        d = json.loads(Path(path).read_text())
        os.unlink(path)
        rows += d["rows"]
        errors += d["errors"]
        cpu.append(d["cpu_s"])
    span = max((r[0] + r[4] for r in rows), default=start_at) - start_at
    return {"rows": rows, "errors": errors, "cpu_s": cpu, "span_s": span, "wall_s": t_end - start_at}


def summary(d: dict[str, Any]) -> dict[str, Any]:
    """The figures bench_gpu_vllm reads: TTFT and TPOT in ms, output tok/s over the load's span, cores used."""
    rows = d["rows"]
    ttft = sorted(r[1] * 1e3 for r in rows)
    tpot = [r[2] * 1e3 for r in rows if r[2] == r[2]]
    tokens = sum(int(r[3]) for r in rows)
    span = d["span_s"] or float("nan")
    cores = sum(d["cpu_s"]) / span if span == span and span > 0 else float("nan")
    return {
        "completed": len(rows),
        "failed": len(d["errors"]),
        "mean_ttft_ms": statistics.fmean(ttft) if ttft else float("nan"),
        "median_ttft_ms": statistics.median(ttft) if ttft else float("nan"),
        "p99_ttft_ms": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))] if ttft else float("nan"),
        "mean_tpot_ms": statistics.fmean(tpot) if tpot else float("nan"),
        "output_tok_s": tokens / span if span == span and span > 0 else float("nan"),
        "output_tokens": tokens,
        "client_cores": cores,
        "wall_s": d["wall_s"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the load, write the JSON (rows and summary), print the summary."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="rand")
    p.add_argument("--tokenizer", default="/tmp/model")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--num-prompts", type=int, default=1024)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--out", default="floor.json")
    a = p.parse_args(argv)
    if a.procs < 1 or a.concurrency < a.procs or a.num_prompts < a.concurrency:
        p.error("need 1 <= --procs <= --concurrency <= --num-prompts")
    d = run(a)
    d["summary"] = s = summary(d)
    Path(a.out).write_text(json.dumps(d))
    print(json.dumps(s))
    return 0 if s["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
