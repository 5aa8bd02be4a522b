"""Peers on the same loads: `vllm bench serve` (and GuideLLM when installed) beside vllm-locust.

Each repetition runs our client and then each peer against a fresh simulator (fixed mode, pinned to core 0),
the client pinned to core 1, so ours and the peers see the same machine noise. Per client and load:
- timing error: median / p99 TTFT and ITL minus the truth (vLLM bench: from its --save-detailed ttfts/itls;
  ours: from records.jsonl; GuideLLM: from its report when it can be read);
- capacity: tokens streamed per client CPU-second over the steady window (/proc utime+stime of the client
  process and its children: vLLM bench and GuideLLM are one process tree; for ours the worker process).

Loads (64 output tokens, closed loop at N concurrent streams, TTFT 50 ms):
``fid64``: 64 streams, ITL 10 ms (the fidelity target load); ``seg256``: 256 streams, ITL 10 ms, one token per
write (24k tok/s); ``burst256``: 256 streams, ITL 2 ms, TTFT 10 ms, 8 events per write.

    python benchmarks/bench_peers.py [--quick] [--reps 3] [--loads fid64,seg256,burst256] [--no-guidellm]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    CACHE,
    CLIENT_CPU,
    PIN,
    Sampler,
    children,
    median,
    ours_latencies,
    print_table,
    run_ours,
    start_sim,
    timing_errors,
    write_json,
)

LOADS: dict[str, dict[str, Any]] = {
    "fid64": {"streams": 64, "ttft_ms": 50, "itl_ms": 10, "extra": []},
    "burst64": {"streams": 64, "ttft_ms": 10, "itl_ms": 0.5, "extra": ["--chunks-per-write", "8"]},
    "seg256": {"streams": 256, "ttft_ms": 50, "itl_ms": 10, "extra": []},
    "burst256": {"streams": 256, "ttft_ms": 10, "itl_ms": 2, "extra": ["--chunks-per-write", "8"]},
}
OUTPUT_LEN, INPUT_LEN = 64, 32
VLLM_PY = CACHE / "vllm-venv" / "bin" / "python"
SHIM = CACHE / "vllm-shim"
TOKENIZER = CACHE / "models" / "tiny-llama"
GUIDELLM = CACHE / "guidellm-venv" / "bin" / "guidellm"


def _req_seconds(load: dict[str, Any]) -> float:
    return (load["ttft_ms"] + (OUTPUT_LEN - 1) * load["itl_ms"]) / 1000.0


def _pinned(cmd: list[str]) -> list[str]:
    return ["taskset", "-c", str(CLIENT_CPU), *cmd] if PIN else cmd


def _run_tree(
    cmd: list[str], sim_url: str, env: dict[str, str], timeout: float
) -> tuple[Any, dict[str, Any]]:
    """Run a peer's command while sampling its process tree's CPU and the simulator's tokens."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    smp = Sampler(sim_url, lambda: [proc.pid, *children(proc.pid)])
    smp.start()
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    smp.stop()
    return proc.returncode, {"window": smp.window(skip_s=3.0), "tail": out[-1500:]}


def vllm_bench(load: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """One `vllm bench serve` run against a fresh simulator."""
    if not VLLM_PY.exists():
        return None
    n = load["streams"]
    prompts = max(n * 4, int(seconds * n / _req_seconds(load)))
    tmp = tempfile.mkdtemp(prefix="peer-vllm-")
    with start_sim(load["itl_ms"], load["ttft_ms"], load["extra"]) as sim:
        cmd = _pinned(
            [
                str(VLLM_PY),
                "-m",
                "vllm.entrypoints.cli.main",
                "bench",
                "serve",
                "--backend",
                "openai-chat",
                "--base-url",
                sim.url,
                "--endpoint",
                "/v1/chat/completions",
                "--model",
                "sim-model",
                "--tokenizer",
                str(TOKENIZER),
                "--dataset-name",
                "random",
                "--random-input-len",
                str(INPUT_LEN),
                "--random-output-len",
                str(OUTPUT_LEN),
                "--ignore-eos",
                "--max-concurrency",
                str(n),
                "--num-prompts",
                str(prompts),
                "--disable-tqdm",
                "--save-result",
                "--save-detailed",
                "--result-dir",
                tmp,
                "--result-filename",
                "r.json",
                "--percentile-metrics",
                "ttft,tpot,itl,e2el",
                "--metric-percentiles",
                "50,99",
            ]
        )
        # VLLM_TARGET_DEVICE=cpu: the shim hides vLLM's "cpu" version, and the generic platform would load the
        # AVX-512 kernels (SIGILL on AVX2-only machines; tests/e2e/cpu_platform.py)
        env = dict(
            os.environ,
            PYTHONPATH=str(SHIM),
            HF_HUB_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            VLLM_TARGET_DEVICE="cpu",
        )
        rc, info = _run_tree(cmd, sim.url, env, timeout=seconds * 6 + 240)
    path = Path(tmp) / "r.json"
    if not path.exists():
        print(f"  vllm bench serve failed (rc {rc}): {info['tail']}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
        return {"error": f"rc {rc}", "tail": info["tail"]}
    d = json.loads(path.read_text())
    shutil.rmtree(tmp, ignore_errors=True)
    ttft = [x * 1000 for x in d.get("ttfts", []) if x]
    itl = [g * 1000 for req in d.get("itls", []) for g in req]
    w = info["window"]
    return {
        "client": "vllm bench serve",
        **timing_errors(ttft, itl, load["ttft_ms"], load["itl_ms"]),
        "tok_s": w["tok_s"],
        "cpu": w["cpu_util"],
        "tok_per_cpu_s": w["tok_per_cpu_s"],
        "completed": d.get("completed"),
        "failed": d.get("failed"),
        "median_ttft_ms": d.get("median_ttft_ms"),
        "p99_ttft_ms": d.get("p99_ttft_ms"),
    }


def guidellm_command(target: str, streams: int, seconds: float, out: Path) -> list[str]:
    """`guidellm run` (0.8's CLI: every option is kind=...,key=value) for a concurrent load of synthetic text."""
    return [
        str(GUIDELLM),
        "run",
        "--backend",
        f"kind=openai_http,target={target},model=sim-model",
        "--profile",
        f"kind=concurrent,streams={streams}",
        "--constraint",
        f"kind=max_duration,seconds={int(seconds)}",
        "--tokenizer",
        f"kind=huggingface_auto,model={TOKENIZER}",
        "--data",
        f"kind=synthetic_text,prompt_tokens={INPUT_LEN},output_tokens={OUTPUT_LEN}",
        "--output",
        f"kind=json,path={out}",
        "--disable-console-interactive",
    ]


def guidellm(load: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """One GuideLLM run (concurrent profile), when its venv exists."""
    if not GUIDELLM.exists():
        return None
    tmp = tempfile.mkdtemp(prefix="peer-guidellm-")
    out = Path(tmp) / "g.json"
    with start_sim(load["itl_ms"], load["ttft_ms"], load["extra"]) as sim:
        cmd = _pinned(guidellm_command(sim.url, load["streams"], seconds, out))
        env = dict(os.environ, HF_HUB_OFFLINE="1", GUIDELLM__REQUEST_TIMEOUT="60")
        rc, info = _run_tree(cmd, sim.url, env, timeout=seconds * 4 + 180)
    w = info["window"]
    row: dict[str, Any] = {
        "client": "GuideLLM",
        "tok_s": w["tok_s"],
        "cpu": w["cpu_util"],
        "tok_per_cpu_s": w["tok_per_cpu_s"],
        "rc": rc,
    }
    try:
        ttft, itl = _guidellm_latencies(json.loads(out.read_text()))
        row.update(timing_errors(ttft, itl, load["ttft_ms"], load["itl_ms"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        row["note"] = f"no per-request timings read: {type(e).__name__}: {e}"[:200]
        row["tail"] = info["tail"]
    shutil.rmtree(tmp, ignore_errors=True)
    return row


def _guidellm_latencies(doc: dict[str, Any]) -> tuple[list[float], list[float]]:
    """TTFT and ITL samples (ms) from a GuideLLM report (per-request stats of the first benchmark)."""
    bench = doc["benchmarks"][0]
    reqs = bench["requests"]["successful"]
    ttft, itl = [], []
    for r in reqs:
        t = r.get("time_to_first_token_ms")
        if t is None and "first_token_time" in r:
            t = (r["first_token_time"] - r["request_start_time"]) * 1000
        if t is not None:
            ttft.append(float(t))
        i = r.get("inter_token_latency_ms")
        if i is not None:
            itl.append(float(i))  # GuideLLM keeps the mean gap per request, not every gap
    return ttft, itl


LOCUSTFILE = Path(__file__).resolve().parent / "peers" / "locust_readline.py"


def locust_bare(load: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """Bare Locust (FastHttpUser + readline + json.loads per event), one process, at the load."""
    exe = Path(sys.executable).with_name("locust")
    locust = [str(exe)] if exe.exists() else [sys.executable, "-m", "locust"]
    tmp = tempfile.mkdtemp(prefix="peer-locust-")
    out = Path(tmp) / "t.json"
    n = load["streams"]
    with start_sim(load["itl_ms"], load["ttft_ms"], load["extra"]) as sim:
        cmd = _pinned(
            [
                *locust,
                "-f",
                str(LOCUSTFILE),
                "--headless",
                "-u",
                str(n),
                "-r",
                str(n * 4),
                "-t",
                f"{int(seconds)}s",
                "--host",
                sim.url,
                "--only-summary",
                "--stop-timeout",
                "5",
            ]
        )
        env = dict(
            os.environ, PEER_OUT=str(out), PEER_OUTPUT_LEN=str(OUTPUT_LEN), PEER_INPUT_WORDS=str(INPUT_LEN)
        )
        rc, info = _run_tree(cmd, sim.url, env, timeout=seconds * 4 + 120)
    ttft: list[float] = []
    itl: list[float] = []
    for f in Path(tmp).glob("t.json.*"):
        d = json.loads(f.read_text())
        ttft += d["ttft"]
        itl += d["itl"]
    shutil.rmtree(tmp, ignore_errors=True)
    w = info["window"]
    return {
        "client": "Locust FastHttpUser+readline",
        **timing_errors(ttft, itl, load["ttft_ms"], load["itl_ms"]),
        "tok_s": w["tok_s"],
        "cpu": w["cpu_util"],
        "tok_per_cpu_s": w["tok_per_cpu_s"],
        "completed": len(ttft),
        "rc": rc,
    }


def ours(
    load: dict[str, Any], seconds: float, *, label: str = "vllm-locust", pythonpath: str = ""
) -> dict[str, Any]:
    """One vllm-locust run (1 worker) at the load; `pythonpath` runs another checkout's code (A/B)."""
    old = os.environ.get("PYTHONPATH")
    if pythonpath:
        os.environ["PYTHONPATH"] = pythonpath + (os.pathsep + old if old else "")
    try:
        with start_sim(load["itl_ms"], load["ttft_ms"], load["extra"]) as sim:
            r = run_ours(
                sim.url,
                users=load["streams"],
                run_time=seconds,
                workers=1,
                output_len=OUTPUT_LEN,
                input_len=INPUT_LEN,
                tag="peer-ours",
            )
    finally:
        if pythonpath:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old
    ttft, itl = ours_latencies(r["run_dir"])
    w = r["window"]
    return {
        "client": label,
        **timing_errors(ttft, itl, load["ttft_ms"], load["itl_ms"]),
        "tok_s": w["tok_s"],
        "cpu": w["cpu_util"],
        "tok_per_cpu_s": w["tok_per_cpu_s"],
        "completed": r["result"]["completed"],
        "failed": r["result"]["failed"],
        "client_bound": r["result"].get("client_bound"),
    }


KEYS = (
    "ttft_err_p50_ms",
    "ttft_err_p99_ms",
    "itl_err_p50_ms",
    "itl_err_p99_ms",
    "tok_s",
    "cpu",
    "tok_per_cpu_s",
)


def main(argv: list[str] | None = None) -> int:
    """Run ours and the peers on each load, print one table, write results/peers.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 repetition, 8 s loads")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--no-guidellm", action="store_true")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument(
        "--no-locust", action="store_true", help="leave out bare Locust (FastHttpUser + readline)"
    )
    ap.add_argument(
        "--ab",
        default="",
        help="also run another checkout of ours (its root, put first on "
        "PYTHONPATH), interleaved: an A/B of our own code",
    )
    a = ap.parse_args(argv)
    reps, secs = (1, 8.0) if a.quick else (a.reps, a.seconds)
    notes = []
    if not VLLM_PY.exists():
        notes.append(f"vllm bench serve skipped: {VLLM_PY} missing (tests/e2e/setup_vllm.sh builds it)")
    if not GUIDELLM.exists():
        notes.append(f"GuideLLM skipped: {GUIDELLM} missing (pip install guidellm into that venv)")
    runs: list[dict[str, Any]] = []
    rows = []
    for name in a.loads.split(","):
        load = LOADS[name]
        per: dict[str, list[dict[str, Any]]] = {}
        for _ in range(reps):
            clients: list[tuple[str, Any]] = [("vllm-locust", ours)]
            if a.ab:
                clients.append(
                    ("vllm-locust (B)", lambda ld, sc: ours(ld, sc, label="vllm-locust (B)", pythonpath=a.ab))
                )
            if not a.no_locust:
                clients.append(("Locust FastHttpUser+readline", locust_bare))
            if not a.no_vllm:
                clients.append(("vllm bench serve", vllm_bench))
            if not a.no_guidellm:
                clients.append(("GuideLLM", guidellm))
            for label, fn in clients:
                t0 = time.time()
                x = fn(load, secs)
                if x is None:
                    continue
                x = {"load": name, **x}
                runs.append(x)
                per.setdefault(label, []).append(x)
                print(
                    f"  {name} {label}: TTFT err {x.get('ttft_err_p50_ms', float('nan')):+.2f}/"
                    f"{x.get('ttft_err_p99_ms', float('nan')):+.2f} ms, {x.get('tok_per_cpu_s', float('nan')):.0f} "
                    f"tok/CPU-s, CPU {x.get('cpu', float('nan')):.0%} ({time.time() - t0:.0f} s)",
                    flush=True,
                )
        for label, xs in per.items():
            rows.append(
                {
                    "load": name,
                    "client": label,
                    "reps": len(xs),
                    **{k: median([x.get(k, float("nan")) for x in xs]) for k in KEYS},
                }
            )
    print_table(rows, ["load", "client", *KEYS, "reps"], "ours beside the peers (median of reps)")
    for n in notes:
        print(n)
    path = write_json(
        "peers",
        {
            "loads": LOADS,
            "output_len": OUTPUT_LEN,
            "input_len": INPUT_LEN,
            "rows": rows,
            "runs": runs,
            "notes": notes,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
