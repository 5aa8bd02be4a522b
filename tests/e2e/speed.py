"""The machine's measured vLLM speed, and the e2e tier's time limits scaled by it.

Every time limit in the tier was set on the dev box. A machine where vLLM runs 2x slower (an AVX2 CPU,
a busy CI runner) needs 2x the time for the same load, so limits are ``scaled(seconds)``: seconds x
REFERENCE_TOK_S / the speed measured here (never below 1x). The speed is measured once per session, right
after the first server is healthy (conftest.py), with CALIBRATION: the back-to-back agreement test's load
shape (128 prompt / 128 output tokens, 8 in flight), 16 requests after an unmeasured warm-up wave. Until
then (setup, the first server's start) the factor is 1.

A shared machine also slows down *during* a session (other jobs start). So the load runs, whose length
is what such a slowdown stretches, have no total limit: ``communicate_progressing`` waits for the load
generator as long as vLLM keeps generating (its own token and request counters move), and fails once they
stand still for ``scaled(STALL_S)``. The runs are bounded in count (their --num-prompts).

    .venv/bin/python -m tests.e2e.speed URL MODEL     # the calibration client alone; prints JSON
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tests.e2e.vllm_env import scrape_metrics

REPO = Path(__file__).resolve().parents[2]
STALL_S = 120  # dev-box seconds in which a loaded vLLM always completes something
# Output tok/s of CALIBRATION on the dev box (2 vCPU with AVX-512, vLLM pinned to one core) where the tier's
# limits were set: its `vllm bench serve` runs of the same load shape gave 1348-1601 tok/s, median 1486
# (docs/agreement.md, back to back).
REFERENCE_TOK_S = 1450.0
CALIBRATION = {"concurrency": 8, "requests": 16, "prompt_words": 110, "output_tokens": 128}
WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda")


@dataclass(frozen=True)
class Speed:
    output_tok_s: float  # CALIBRATION's output tokens / its wall time

    @property
    def factor(self) -> float:
        """How much longer than on the dev box this machine needs for the same load (>= 1)."""
        return max(1.0, REFERENCE_TOK_S / self.output_tok_s)

    def describe(self) -> str:
        """One line for the tier's summary."""
        return (
            f"vLLM speed {self.output_tok_s:.0f} output tok/s at concurrency {CALIBRATION['concurrency']} "
            f"(dev box {REFERENCE_TOK_S:.0f}): time limits x{self.factor:.2f}"
        )


_measured: list[Speed] = []


def current() -> Speed | None:
    """The speed measured in this session (None before the first server)."""
    return _measured[-1] if _measured else None


def scaled(seconds: float) -> float:
    """A time limit set on the dev box, stretched by this machine's measured slowness."""
    s = current()
    return seconds * (s.factor if s is not None else 1.0)


def server_progress(url: str) -> float:
    """vLLM's generated tokens plus finished requests so far (grows while the server does work)."""
    m = scrape_metrics(url, model_name=None)
    return m.get("vllm:generation_tokens_total", 0.0) + m.get("vllm:request_success_total", 0.0)


def communicate_progressing(proc: subprocess.Popen, url: str, stall_s: float | None = None) -> str:
    """proc.communicate() for as long as vLLM at `url` makes progress; subprocess.TimeoutExpired (after
    which proc is still running: the caller stops it) when its counters stand still for stall_s
    (default scaled(STALL_S)) seconds."""
    stall = stall_s if stall_s is not None else scaled(STALL_S)
    poll = min(5.0, max(0.1, stall / 4))
    last, since = server_progress(url), time.monotonic()
    while True:
        try:
            return proc.communicate(timeout=poll)[0] or ""
        except subprocess.TimeoutExpired:
            now = server_progress(url)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > stall:
                raise subprocess.TimeoutExpired(proc.args, stall) from None


def _one(url: str, model: str, i: int, max_tokens: int) -> int:
    """One streamed chat request; its completion_tokens from the usage chunk."""
    u = urlsplit(url)
    text = " ".join(
        WORDS[(i * 7 + k * 3) % len(WORDS)] + str(k % 10) for k in range(CALIBRATION["prompt_words"])
    )
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()[:500]
        tokens = 0
        while line := resp.readline():
            if line.startswith(b"data: {") and b'"usage":{' in line:
                tokens = json.loads(line[6:])["usage"]["completion_tokens"]
        return tokens
    finally:
        conn.close()


def _wave(url: str, model: str, n: int, concurrency: int, max_tokens: int) -> tuple[int, float]:
    """n requests, `concurrency` at a time: (output tokens, wall seconds)."""
    todo, lock, total = list(range(n)), threading.Lock(), [0]

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            got = _one(url, model, i, max_tokens)
            with lock:
                total[0] += got

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return total[0], time.perf_counter() - t0


def measure(url: str, model: str) -> dict[str, float]:
    """CALIBRATION against url (after a warm-up wave): output tokens, seconds, tok/s."""
    c = CALIBRATION["concurrency"]
    _wave(url, model, c, c, 8)
    tokens, wall = _wave(url, model, CALIBRATION["requests"], c, CALIBRATION["output_tokens"])
    want = CALIBRATION["requests"] * CALIBRATION["output_tokens"]
    assert tokens == want, f"calibration got {tokens} output tokens, sent for {want}"
    return {"output_tokens": tokens, "seconds": wall, "output_tok_s": tokens / wall}


def calibrate(url: str, model: str, preexec=None) -> Speed:
    """Measure the server's speed with the calibration client in its own process (on the client CPUs,
    like every load generator of the tier); remember it for scaled()."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.e2e.speed", url, model],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=scaled(600),
        preexec_fn=preexec,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    speed = Speed(json.loads(proc.stdout.strip().splitlines()[-1])["output_tok_s"])
    _measured.append(speed)
    print(f"\ne2e: {speed.describe()}", flush=True)
    return speed


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
