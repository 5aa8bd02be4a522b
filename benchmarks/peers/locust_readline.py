"""The bare-Locust peer: FastHttpUser, the raw response read with readline() and each event json.loads'ed.

What a Locust user would write by hand (DESIGN.md section 2): one POST per task, `stream=True`, the
geventhttpclient response read line by line, TTFT and every inter-chunk gap taken with perf_counter after
each line. On quit, each process writes its samples to $PEER_OUT (JSON: ttft, itl in ms) for bench_peers.py.

    PEER_OUT=/tmp/x.json locust -f benchmarks/peers/locust_readline.py --headless -u 64 -r 256 -t 12s \
        --host http://127.0.0.1:8000
"""

from __future__ import annotations

import json
import os
from time import perf_counter
from typing import Any

from locust import constant, events, task
from locust.contrib.fasthttp import FastHttpUser

TTFT: list[float] = []
ITL: list[float] = []
BODY = json.dumps(
    {
        "model": os.environ.get("PEER_MODEL", "sim-model"),
        "messages": [
            {"role": "user", "content": " ".join(["hi"] * int(os.environ.get("PEER_INPUT_WORDS", "32")))}
        ],
        "max_tokens": int(os.environ.get("PEER_OUTPUT_LEN", "64")),
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
)
HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}


class ReadlineUser(FastHttpUser):
    """One streamed chat request per task, timed per line."""

    wait_time = constant(0)
    network_timeout = 120.0

    @task
    def chat(self) -> None:
        """POST, then readline until the body ends; time the output-carrying chunks."""
        times: list[float] = []
        t0 = perf_counter()
        resp = self.client.request("POST", "/v1/chat/completions", data=BODY, headers=HEADERS, stream=True)
        raw = resp._response
        if raw is None:
            return
        while True:
            line = raw.readline(b"\n")  # SSE lines end in LF (the default separator is CRLF)
            if not line:
                break
            now = perf_counter()
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            d: Any = json.loads(line[6:])
            ch = d.get("choices")
            if ch and (ch[0].get("delta") or {}).get("content"):
                times.append(now)
        if times:
            TTFT.append((times[0] - t0) * 1000.0)
            ITL.extend((b - a) * 1000.0 for a, b in zip(times, times[1:], strict=False))


@events.quitting.add_listener
def _dump(**_: Any) -> None:
    out = os.environ.get("PEER_OUT")
    if out:
        with open(f"{out}.{os.getpid()}", "w") as fh:
            json.dump({"ttft": TTFT, "itl": ITL}, fh)
