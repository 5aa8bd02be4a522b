"""MoE on real vLLM, one GPU: the moe preset's concurrency sweep and the real router's expert balance.

Three phases, each bounded, no bare waits:
  0. EPLB: vLLM's own config check (ParallelConfig with --enable-eplb --enable-expert-parallel), in the
     background while phase 1 starts. vLLM 0.26 refuses EPLB on one GPU (it needs TP x PCP x DP > 1): the
     refusal's text goes into the result.
  1. Serve the model plain (`--enforce-eager --no-enable-prefix-caching`: the sweep's steps reuse one seed),
     warm up at 1..64 streams (Triton compiles the fused-MoE kernel per batch-size bucket), run
     `orchestration.cli run --preset moe` against it: output tok/s and scaling efficiency per concurrency.
  2. Restart it with `--enable-return-routed-experts` (capture costs speed: not during the sweep), send
     `--probe-requests` non-streamed completions and count the router's choices per layer and expert
     (benchmarks/moe_routing.py: routed_expert_counts / routing_balance).
Writes OUT/moe_gpu.json and prints a table. Never asserts on a GPU figure.

    python benchmarks/bench_gpu_moe.py --out OUT [--model-dir /tmp/moe] [--sweep 1,2,4,8,16,32,64]
    python benchmarks/bench_gpu_moe.py --out OUT --no-server --host http://127.0.0.1:PORT   # dry run (simulator)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import moe_routing  # noqa: E402
from orchestration.server import moe_experts  # noqa: E402
from orchestration.settings import presets  # noqa: E402

SERVE = (
    "python3 -m vllm.entrypoints.cli.main serve {model_dir} --served-model-name {model} --enforce-eager "
    "--no-enable-prefix-caching --max-model-len 4096 --gpu-memory-utilization 0.6 --host 127.0.0.1 "
    "--port {port} --attention-backend FLASH_ATTN"
)
ROUTING_FLAG = "--enable-return-routed-experts"
EPLB_CHECK = (
    "from vllm.config import ParallelConfig\n"
    "ParallelConfig(enable_expert_parallel=True, enable_eplb=True)\nprint('EPLB accepted on one GPU')"
)


def log(msg: str) -> None:
    """One timestamped progress line."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def healthy(host: str) -> bool:
    """GET /health answers 200."""
    try:
        with urllib.request.urlopen(host + "/health", timeout=3) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def stop_group(pid: int, what: str, grace: float = 30.0) -> None:
    """SIGTERM the process group led by `pid` (a server started in its own session), SIGKILL after `grace`."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    log(f"stopping {what} (pid {pid}, group {pgid})")
    os.killpg(pgid, signal.SIGTERM)
    end = time.time() + grace
    while time.time() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    time.sleep(2)


def start_server(cmd: str, log_path: Path, pidfile: Path) -> subprocess.Popen[bytes]:
    """`cmd` in its own session (it outlives a device call), output to log_path, its pid to pidfile."""
    env = dict(
        os.environ,
        VLLM_USE_FLASHINFER_SAMPLER="0",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    log(f"starting: {cmd}")
    with open(log_path, "wb") as fh:
        p = subprocess.Popen(
            shlex.split(cmd),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    pidfile.write_text(str(p.pid))
    return p


def wait_healthy(
    host: str, proc: subprocess.Popen[bytes] | None, timeout: float, log_path: Path | None
) -> float:
    """Seconds until /health answers; RuntimeError (with the log's tail) when the server dies or times out."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if healthy(host):
            return time.time() - t0
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(1)
    tail = log_path.read_text(errors="replace")[-4000:] if log_path and log_path.exists() else ""
    raise RuntimeError(
        f"no /health from {host} after {time.time() - t0:.0f} s (exit {proc and proc.poll()}):\n{tail}"
    )


def completions(host: str, model: str, n: int, max_tokens: int, deadline: float, words: int = 128) -> None:
    """n concurrent non-streamed completions (warm-up), waited on until `deadline` (time.time()); errors ignored."""

    def one(i: int) -> None:
        body = {
            "model": model,
            "prompt": f"warm up {i} " + "word " * words,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
        req = urllib.request.Request(
            host + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(req, timeout=max(1.0, deadline - time.time())).read()
        except OSError:
            pass

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.time()))


def warm_up(host: str, model: str, budget: float = 120.0) -> float:
    """Batch sizes 1..64, so the sweep's steps find the fused-MoE kernels compiled; returns seconds (at most
    about `budget`)."""
    t0 = time.time()
    for c in (1, 4, 16, 64):
        completions(host, model, c, 16, t0 + budget)
    return time.time() - t0


def run_sweep(a: argparse.Namespace, runs: Path) -> dict[str, Any] | None:
    """`vllm-locust run --preset moe` against a.host; sweep.json's object, None if it wrote none."""
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--preset",
        "moe",
        "--host",
        a.host,
        "--model",
        a.model,
        "--concurrency-sweep",
        a.sweep,
        "--output-dir",
        str(runs),
        "--run-name",
        "moe-sweep",
        "--quiet",
        "--gpus",
        str(a.gpus),
        "--workers",
        str(a.workers),
    ]
    if a.tokenizer:
        cmd += ["--tokenizer", a.tokenizer]
    if a.num_prompts:
        cmd += ["--num-prompts", str(a.num_prompts)]
    cmd += shlex.split(a.run_args)
    log("sweep: " + shlex.join(cmd))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":")
    )
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, timeout=a.sweep_timeout, capture_output=True, text=True)
        print(p.stdout[-6000:], p.stderr[-3000:], sep="\n", flush=True)
        log(f"sweep exit {p.returncode}")
    except subprocess.TimeoutExpired:
        log(f"sweep: past {a.sweep_timeout} s, stopped (steps that finished are kept)")
    path = runs / "moe-sweep" / "sweep.json"
    return json.loads(path.read_text()) if path.exists() else None


def sweep_rows(doc: dict[str, Any] | None, gpus: int) -> list[dict[str, Any]]:
    """Per concurrency step: output tok/s (total and per GPU), scaling efficiency, latencies, expert balance."""
    rows = []
    for s in (doc or {}).get("steps", []):
        tput = s.get("output_throughput")
        load = s.get("expert_load") or {}
        rows.append(
            {
                "concurrency": s.get("concurrency"),
                "completed": s.get("completed"),
                "failed": s.get("failed"),
                "out_tok_s": tput,
                "out_tok_s_per_gpu": tput / gpus if tput is not None else None,
                "efficiency": s.get("scaling_efficiency"),
                "ttft_p50_ms": s.get("ttft_p50_ms"),
                "tpot_p50_ms": s.get("tpot_p50_ms"),
                "e2el_p99_ms": s.get("e2el_p99_ms"),
                "experts_max_over_mean": load.get("max_over_mean"),
                "experts_cv": load.get("cv"),
            }
        )
    return rows


def eplb_check(python: str) -> subprocess.Popen[str]:
    """vLLM's ParallelConfig asked for EPLB on one GPU, in the background."""
    return subprocess.Popen(
        [python, "-c", EPLB_CHECK], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def eplb_answer(p: subprocess.Popen[str] | None, timeout: float = 120.0) -> dict[str, Any]:
    """What vLLM said to EPLB on one GPU: accepted, or the refusal's last line."""
    if p is None:
        return {"checked": False, "note": moe_routing.EPLB_ONE_GPU}
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        return {"checked": False, "note": "vLLM's config check ran past its time"}
    lines = [x for x in out.strip().splitlines() if x.strip()]
    said = next((x.strip() for x in reversed(lines) if "eplb" in x.lower() or "expert" in x.lower()), "")
    said = said or (lines[-1] if lines else "")
    return {
        "checked": True,
        "accepted": p.returncode == 0,
        "vllm_says": said[-500:],
        "note": None if p.returncode == 0 else moe_routing.EPLB_ONE_GPU,
    }


def log_lines(path: Path, words: tuple[str, ...] = ("eplb", "expert", "moe")) -> list[str]:
    """The vLLM log's lines that name EPLB, experts or MoE (at most 60)."""
    if not path.exists():
        return []
    return [x for x in path.read_text(errors="replace").splitlines() if any(w in x.lower() for w in words)][
        :60
    ]


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out", type=Path, required=True, help="moe_gpu.json, the run directories and vLLM's logs"
    )
    p.add_argument("--host", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="moe")
    p.add_argument("--model-dir", default="/tmp/moe")
    p.add_argument("--tokenizer", default=None, help="default: --model-dir (none with --no-server)")
    p.add_argument("--sweep", default=presets.DEFAULT_SWEEP)
    p.add_argument("--num-prompts", type=int, default=None, help="per step (default: the sweep's, 4 x users)")
    p.add_argument("--run-args", default="", help="more `vllm-locust run` flags, one string")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--workers", type=int, default=4, help="the sweep's worker processes (64 users at most)")
    p.add_argument("--experts", type=int, default=None, help="default: the model's config.json")
    p.add_argument("--serve", default=SERVE, help="server command template ({model_dir} {model} {port})")
    p.add_argument("--serve-extra", default="", help="flags added to both servers")
    p.add_argument(
        "--pidfile", type=Path, default=Path("/tmp/vllm.pid"), help="a running server to stop first"
    )
    p.add_argument("--no-server", action="store_true", help="use what serves --host; start and stop nothing")
    p.add_argument(
        "--keep-server", action="store_true", help="leave the last server running (pid in --pidfile)"
    )
    p.add_argument("--no-eplb-check", action="store_true")
    p.add_argument("--vllm-python", default=sys.executable, help="the Python that imports vllm (EPLB check)")
    p.add_argument("--probe-requests", type=int, default=32)
    p.add_argument("--probe-max-tokens", type=int, default=64)
    p.add_argument("--health-timeout", type=float, default=240.0)
    p.add_argument("--sweep-timeout", type=float, default=300.0)
    a = p.parse_args(argv)
    if a.tokenizer is None and not a.no_server:
        a.tokenizer = a.model_dir
    return a


def experts_of(a: argparse.Namespace) -> int:
    """--experts, else the model's num_local_experts (Mixtral) / num_experts, else 8."""
    if a.experts:
        return int(a.experts)
    cfg = Path(a.model_dir) / "config.json"
    if cfg.exists():
        c = json.loads(cfg.read_text())
        return int(c.get("num_local_experts") or c.get("num_experts") or 8)
    return 8


def main(argv: list[str] | None = None) -> int:
    """The three phases; writes OUT/moe_gpu.json."""
    a = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_term)  # `timeout` stops us: still write what was measured
    a.out.mkdir(parents=True, exist_ok=True)
    port = a.host.rsplit(":", 1)[-1].strip("/")
    doc: dict[str, Any] = {
        "host": a.host,
        "model": a.model,
        "model_dir": a.model_dir,
        "gpus": a.gpus,
        "sweep": a.sweep,
        "server": None if a.no_server else {},
    }
    model_info = Path(a.model_dir) / ".done"
    if model_info.exists():
        doc["model_info"] = json.loads(model_info.read_text())
    checker = None if (a.no_server or a.no_eplb_check) else eplb_check(a.vllm_python)
    proc = None
    logs = {"plain": a.out / "vllm_plain.log", "routing": a.out / "vllm_routing.log"}
    try:
        # phase 1: plain server, sweep
        if not a.no_server:
            if a.pidfile.exists() and a.pidfile.read_text().strip().isdigit():
                stop_group(int(a.pidfile.read_text().strip()), "the running vllm serve")
            for _ in range(30):  # the old server lets go of the port (and the GPU) before ours starts
                if not healthy(a.host):
                    break
                time.sleep(1)
            else:
                raise RuntimeError(
                    f"{a.host} still answers after stopping the pid in {a.pidfile}: stop it first"
                )
            cmd = a.serve.format(model_dir=a.model_dir, model=a.model, port=port) + " " + a.serve_extra
            proc = start_server(cmd.strip(), logs["plain"], a.pidfile)
            doc["server"]["plain"] = {
                "cmd": cmd.strip(),
                "healthy_s": wait_healthy(a.host, proc, a.health_timeout, logs["plain"]),
            }
            log(f"healthy after {doc['server']['plain']['healthy_s']:.0f} s")
            doc["server"]["plain"]["warm_up_s"] = warm_up(a.host, a.model)
        elif not healthy(a.host):
            raise RuntimeError(f"--no-server: nothing answers {a.host}/health")
        sweep = run_sweep(a, a.out / "runs")
        doc["sweep_doc"] = sweep
        doc["rows"] = sweep_rows(sweep, a.gpus)
        # phase 2: routing capture, expert balance
        if not a.no_server and proc is not None:
            stop_group(proc.pid, "the plain server")
            cmd = (
                a.serve.format(model_dir=a.model_dir, model=a.model, port=port)
                + f" {ROUTING_FLAG} {a.serve_extra}"
            )
            proc = start_server(cmd.strip(), logs["routing"], a.pidfile)
            doc["server"]["routing"] = {"cmd": cmd.strip()}
            try:
                doc["server"]["routing"]["healthy_s"] = wait_healthy(
                    a.host, proc, a.health_timeout, logs["routing"]
                )
            except RuntimeError as e:
                doc["server"]["routing"]["error"] = str(e)[-2000:]
                log(f"the routing-capture server did not come up: {str(e)[-600:]}")
        balance: dict[str, Any] = {"simulator_counters": moe_experts.expert_counters(a.host) is not None}
        failed = (doc["server"] or {}).get("routing", {}).get("error")
        if failed:
            said = [x for x in failed.splitlines() if "error" in x.lower()]
            balance["note"] = "the server with --enable-return-routed-experts did not start: " + (
                said[-1].strip() if said else failed.splitlines()[0]
            )
        elif healthy(a.host):
            try:
                counts = moe_routing.routed_expert_counts(
                    a.host, a.model, experts_of(a), requests=a.probe_requests, max_tokens=a.probe_max_tokens
                )
            except (OSError, ValueError) as e:
                counts, balance["error"] = None, f"{type(e).__name__}: {e}"
            if counts is None:
                balance["note"] = moe_routing.NO_ROUTING
            else:
                balance.update(counts)
                balance.update(moe_routing.routing_balance(counts["per_layer"]))
        doc["expert_balance"] = balance
    except RuntimeError as e:
        doc["error"] = str(e)[-3000:]
        log(f"error: {str(e)[-1500:]}")
    finally:
        doc["eplb"] = (
            eplb_answer(checker)
            if checker is not None
            else {"checked": False, "note": moe_routing.EPLB_ONE_GPU}
        )
        doc["eplb"]["log_lines"] = [
            x
            for p in logs.values()
            for x in moe_routing.eplb_log_lines(p.read_text(errors="replace") if p.exists() else "")
        ]
        doc["vllm_log_moe_lines"] = {k: log_lines(p) for k, p in logs.items()}
        (a.out / "moe_gpu.json").write_text(json.dumps(doc, indent=2, default=str))
        print_summary(doc)
        if proc is not None and not a.keep_server:  # port 8000 free again: setup.sh can serve `rand` after us
            stop_group(proc.pid, "the MoE server")
            a.pidfile.unlink(missing_ok=True)
        kept = proc is not None and a.keep_server
        log(f"wrote {a.out / 'moe_gpu.json'}" + (f"; server kept, pid in {a.pidfile}" if kept else ""))
    return 0 if "error" not in doc else 3


def _on_term(signum: int, _frame: Any) -> None:
    raise RuntimeError(f"stopped by signal {signum}")


def _f(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def print_summary(doc: dict[str, Any]) -> None:
    """The sweep table, the expert balance and EPLB's answer."""
    print(f"\n== MoE on {doc['host']} ({doc['gpus']} GPU), model {doc['model']}")
    print(
        f"{'conc':>5}{'done':>6}{'out tok/s':>11}{'tok/s/GPU':>11}{'eff':>6}{'TTFT p50':>10}{'TPOT p50':>10}"
        f"{'exp max/mean':>13}"
    )
    for r in doc.get("rows", []):
        print(
            f"{_f(r['concurrency'], 'd'):>5}{_f(r['completed'], 'd'):>6}{_f(r['out_tok_s'], '.1f'):>11}"
            f"{_f(r['out_tok_s_per_gpu'], '.1f'):>11}{_f(r['efficiency']):>6}{_f(r['ttft_p50_ms'], '.1f'):>10}"
            f"{_f(r['tpot_p50_ms']):>10}{_f(r['experts_max_over_mean']):>13}"
        )
    b = doc.get("expert_balance") or {}
    if b.get("per_layer"):
        print(
            f"router (routed_experts, {b['requests']} requests, {b['token_positions']} token positions, "
            f"{b['layers']} layers, top-{b['topk']}): experts max/mean {_f(b['max_over_mean'])}, "
            f"CV {_f(b['cv'], '.3f')}, mean per-layer max/mean {_f(b['layer_max_over_mean'])}"
        )
        print(
            "EPLB-style balancedness if spread over N GPUs (before rearrangement): "
            + ", ".join(f"N={n}: {_f(v, '.3f')}" for n, v in b["eplb_balancedness_if_spread"].items())
        )
    else:
        print(f"router expert balance: absent ({b.get('note') or b.get('error') or 'not measured'})")
    e = doc.get("eplb") or {}
    state = ("accepted" if e.get("accepted") else "refused by vLLM") if e.get("checked") else "not checked"
    print(f"EPLB on {doc['gpus']} GPU: {state}: {e.get('vllm_says') or e.get('note')}")


if __name__ == "__main__":
    sys.exit(main())
