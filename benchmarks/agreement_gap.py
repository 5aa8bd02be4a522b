"""Why ours and `vllm bench serve` differ on the back-to-back load: the server's own histograms of both runs.

    .venv/bin/python -m benchmarks.agreement_gap [--rounds 4] [--out benchmarks/results/agreement_gap.json]

One real vLLM (the e2e fixture's: tests/e2e/vllm_env.py, pinned to the server half of the CPUs). The load
of tests/e2e/test_agreement_vllm_bench.py, each tool in turn, alternating the order. Around every run:
/metrics in full (histogram buckets too) before and after, so each run gets its own delta of vLLM's
TTFT, queue time, prefill/decode time, inter-token latency, TPOT, E2E latency, iteration-token and
prompt-length histograms and the API server's CPU seconds; and the client's CPU seconds and CPU affinity.
A client that is slower to send shows as a client TTFT/TPOT above the server's with the server's figures
equal; a client that slows the server shows in the server's own histograms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from tests.e2e import speed
from tests.e2e.server_histograms import delta, scrape_full
from tests.e2e.test_agreement_vllm_bench import IN, OUT, C, N, bench_argv
from tests.e2e.test_scenarios_real_vllm import RecordingProxy, _proxy_handler, run_vllm_locust
from tests.e2e.vllm_env import client_preexec, ensure_vllm, start_vllm_server


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def _watch_affinity(stop: threading.Event, seen: dict[str, str]) -> None:
    """Record the CPU affinity of every process below this one, by command name, while a tool runs."""
    while not stop.is_set():
        for p in _descendants(os.getpid()):
            try:
                name = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80]
                seen[name] = ",".join(map(str, sorted(os.sched_getaffinity(p))))
            except OSError:
                pass
        stop.wait(0.5)


def one_run(tool: str, env, srv, out_dir: Path, seed: int, metrics_url: str | None = None) -> dict[str, Any]:
    """Run one tool on the load; the server's deltas, the client's CPU seconds and affinities, its result."""
    metrics_url = metrics_url or srv.url
    seen: dict[str, str] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_affinity, args=(stop, seen), daemon=True)
    before = scrape_full(metrics_url)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    watcher.start()
    t0 = time.monotonic()
    if tool == "bench":
        name = f"bench-{seed}.json"
        argv = bench_argv(env, srv, out_dir, name, n=N, c=C, in_len=IN, out_len=OUT, seed=seed)
        proc = subprocess.run(
            argv,
            env=env.bench_env(),
            capture_output=True,
            text=True,
            timeout=1200,
            preexec_fn=client_preexec(),
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads((out_dir / name).read_text())
    else:
        result = run_vllm_locust(
            srv.url,
            out_dir,
            f"ours-{seed}",
            "--scenario",
            "chat",
            "--model",
            srv.model_name,
            "--request-rate",
            "inf",
            "--max-concurrency",
            str(C),
            "--num-prompts",
            str(N),
            "--input-len",
            str(IN),
            "--output-len",
            str(OUT),
            "--ignore-eos",
            "--seed",
            str(seed),
            "--no-server-metrics",
            "--workers",
            "1",
        ).result
    wall = time.monotonic() - t0
    stop.set()
    watcher.join()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    time.sleep(0.5)
    after = scrape_full(metrics_url)
    keep = (
        "completed",
        "duration",
        "total_input_tokens",
        "output_throughput",
        "median_ttft_ms",
        "mean_ttft_ms",
        "median_tpot_ms",
        "mean_tpot_ms",
        "median_itl_ms",
        "median_e2el_ms",
    )
    return {
        "tool": tool,
        "seed": seed,
        "wall_s": wall,
        "client": {k: result.get(k) for k in keep},
        "client_cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
        "affinity": seen,
        "server": delta(before, after),
    }


def capture_bodies(tool: str, env, srv, out_dir: Path, seed: int) -> list[bytes]:
    """The exact request bodies one tool sends for the load (through a recording proxy; preflight left out)."""
    proxy = RecordingProxy(srv.host, srv.port)
    proxy.server = ThreadingHTTPServer(("127.0.0.1", 0), _proxy_handler(proxy))
    threading.Thread(target=proxy.server.serve_forever, daemon=True).start()
    via = SimpleNamespace(url=proxy.url, model_name=srv.model_name)
    try:
        one_run(tool, env, via, out_dir, seed, metrics_url=srv.url)
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()
    bodies = [
        ex.request
        for body, ex in proxy.chat_posts("messages")
        if (body.get("max_tokens") or body.get("max_completion_tokens")) == OUT
    ]
    assert len(bodies) == N, len(bodies)
    return bodies


def replay(url: str, bodies: list[bytes]) -> float:
    """Send `bodies` with one neutral client (threads, http.client, C at a time); the wall seconds."""
    u = urlsplit(url)
    todo, lock = list(reversed(bodies)), threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                body = todo.pop()
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=1200)
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            while resp.read(65536):
                pass
            conn.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(C)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def replay_rounds(env, srv, tmp: Path, rounds: int) -> list[dict[str, Any]]:
    """Each tool's captured bodies replayed by the same neutral client, alternately: does the content matter?"""
    bodies = {tool: capture_bodies(tool, env, srv, tmp, 900 + (tool == "ours")) for tool in ("bench", "ours")}
    out = []
    for i in range(rounds):
        for tool in ("bench", "ours") if i % 2 == 0 else ("ours", "bench"):
            before = scrape_full(srv.url)
            wall = replay(srv.url, bodies[tool])
            time.sleep(0.5)
            s = delta(before, scrape_full(srv.url))
            out.append({"bodies_of": tool, "wall_s": wall, "server": s})
            print(
                f"replay {i + 1} bodies of {tool:5s}: wall {wall:6.1f} s, server TPOT mean "
                f"{s['request_time_per_output_token_seconds']['mean'] * 1e3:6.2f} ms, TTFT mean "
                f"{s['time_to_first_token_seconds']['mean'] * 1e3:7.1f} ms, steps {s['iteration_tokens_total']['count']:.0f}",
                flush=True,
            )
    return out


def busy_client_core(url: str, model: str, rounds: int) -> list[dict[str, Any]]:
    """Does CPU work on the client half slow vLLM on the server half? The speed calibration load, alternately
    with the client CPUs idle and with one busy loop pinned there."""
    out = []
    for i in range(rounds):
        for busy in (False, True) if i % 2 == 0 else (True, False):
            hog = None
            if busy:
                hog = subprocess.Popen(
                    [sys.executable, "-c", "while True: pass"], preexec_fn=client_preexec()
                )
            try:
                before = scrape_full(url)
                m = speed.measure(url, model)
                s = delta(before, scrape_full(url))
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            tpot = s["request_time_per_output_token_seconds"]["mean"] * 1e3
            out.append(
                {"client_cpus_busy": busy, "output_tok_s": m["output_tok_s"], "server_mean_tpot_ms": tpot}
            )
            print(
                f"busy client core {busy!s:5s}: {m['output_tok_s']:7.1f} tok/s, server TPOT mean {tpot:6.2f} ms",
                flush=True,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """Start the fixture's server, run both tools alternately, write the per-run deltas as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", default="benchmarks/results/agreement_gap.json")
    ap.add_argument(
        "--replay",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also replay each tool's captured request bodies with one neutral client, ROUNDS times",
    )
    a = ap.parse_args(argv)
    env = ensure_vllm()
    tmp = Path(tempfile.mkdtemp(prefix="agreement-gap-"))
    runs: list[dict[str, Any]] = []
    with start_vllm_server(env, log_dir=tmp, extra_args=["--enable-prompt-tokens-details"]) as srv:
        one_run("bench", env, srv, tmp, 999)  # warm-up, not kept
        busy = busy_client_core(srv.url, srv.model_name, a.busy) if a.busy else []
        replays = replay_rounds(env, srv, tmp, a.replay) if a.replay else []
        for i in range(a.rounds):
            order = ("bench", "ours") if i % 2 == 0 else ("ours", "bench")
            for tool in order:
                r = one_run(tool, env, srv, tmp, 1000 + 2 * i + (tool == "ours"))
                runs.append(r)
                s, c = r["server"], r["client"]
                print(
                    f"round {i + 1} {tool:5s} tok/s {c['output_throughput']:7.1f} TTFT p50 {c['median_ttft_ms']:6.1f} "
                    f"TPOT p50 {c['median_tpot_ms']:5.2f} | server TTFT mean {s['time_to_first_token_seconds']['mean'] * 1e3:6.1f} "
                    f"queue {s['request_queue_time_seconds']['mean'] * 1e3:6.1f} ms, TPOT mean "
                    f"{s['request_time_per_output_token_seconds']['mean'] * 1e3:5.2f} ms, e2e mean "
                    f"{s['e2e_request_latency_seconds']['mean']:5.3f} s, iter tok mean {s['iteration_tokens_total']['mean']:5.2f} "
                    f"n_iter {s['iteration_tokens_total']['count']:.0f}, prompt tok mean "
                    f"{s['request_prompt_tokens']['mean']:.1f}, api cpu {s['process_cpu_seconds_total']:.1f} s, "
                    f"client cpu {r['client_cpu_s']:.1f} s",
                    flush=True,
                )
    by_tool = {t: [r for r in runs if r["tool"] == t] for t in ("bench", "ours")}
    summary = {
        t: {"median_output_throughput": statistics.median(r["client"]["output_throughput"] for r in rs)}
        if rs
        else {}
        for t, rs in by_tool.items()
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "cpu_split_pin": os.environ.get("VLLM_LOCUST_E2E_PIN", "1"),
                "runs": runs,
                "replays": replays,
                "busy_client_core": busy,
                "summary": summary,
            },
            indent=1,
        )
        + "\n"
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
