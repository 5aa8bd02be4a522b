"""One master's ceiling: synthetic workers send realistic record batches to one real Locust master.

The master is the real thing (`locust -f locustfiles/chat.py --master` with vllm-locust's plugin: Collector,
records.jsonl + records.parquet, histogram merges); the workers are synthetic: each speaks Locust's zmq worker
protocol (client_ready, heartbeat, spawning_complete) and every second sends one `vllm_batch` built by the
real worker code (RequestRecords of 64 chunks → JSON lines, packed columns, encoded HdrHistograms), then its
final batch on `vllm_stop`. Driver processes host the synthetic workers (gevent, one zmq socket each).

Per worker count: records/s offered and ingested, the master's CPU (of one core) and peak RSS, and the batch
lag at intake (now − sent_at, master_ingest.json), plus the time from the end of the run to the result.

    python benchmarks/bench_master.py [--workers 8,32,64,128] [--rate 500] [--seconds 20] [--records-at-end]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, cpu_seconds, print_table, write_json

from orchestration.launch.ports import free_port


def _records(n: int, worker: str, seq0: int) -> list[Any]:
    from vllm_users.measure.record import RequestRecord

    base = [48_000 + 10_000 * i for i in range(64)]
    return [
        RequestRecord(
            scenario="chat",
            worker=worker,
            user=i % 256,
            seq=seq0 + i,
            endpoint="chat",
            t_start=time.time() - 1 + i / n,
            chunk_times_us=[x + (i * 37) % 900 for x in base],
            end_us=base[-1] + 300,
            prompt_tokens=32,
            output_tokens=64,
            status=200,
            finish_reason="length",
            input_len=32,
            output_len=64,
        )
        for i in range(n)
    ]


def _batch(worker: str, n: int, seq0: int, with_records: bool) -> dict[str, Any]:
    """One batch as WorkerContext.take_batch builds it."""
    from vllm_users.measure.columns import pack_records
    from vllm_users.measure.histograms import HistogramSet

    recs = _records(n, worker, seq0)
    hs = HistogramSet()
    for r in recs:
        hs.add_record(r)
    return {
        "worker": worker,
        "records": "\n".join(r.to_json() for r in recs) if with_records else "",
        "n": n if with_records else 0,
        "cols": pack_records(recs) if with_records else None,
        "hists": hs.encode(),
        "health": {"cpu": [0.5], "lag_ms": [1.0] * 20},
        "final": False,
        "total": 0,
        "totals": {"ok": 0, "failed": 0, "output_tokens": 0, "inflight": 256},
        "sent_at": 0.0,
    }


def _driver(port: int, names: list[str], rate: int, at_end: bool, out: str) -> None:
    """A process hosting synthetic workers (gevent)."""
    from gevent import monkey

    monkey.patch_all()
    import gevent
    from locust import __version__
    from locust.rpc import Message, zmqrpc

    sys.path.insert(0, str(ROOT))
    sent: dict[str, int] = {}
    end_chunks: dict[
        int, dict[str, Any]
    ] = {}  # built once per driver: the driver must not be what is measured

    def worker(name: str) -> None:
        c = zmqrpc.Client("127.0.0.1", port, name)
        c.send(Message("client_ready", __version__, name))
        template = _batch(name, rate, 0, with_records=not at_end)
        state = {"running": False, "stop": False, "quit": False, "n": 0}

        def beat() -> None:
            while not state["quit"]:
                st = "running" if state["running"] else "ready"
                c.send(
                    Message(
                        "heartbeat", {"state": st, "current_cpu_usage": 5.0, "current_memory_usage": 1}, name
                    )
                )
                gevent.sleep(1.0)

        def batches() -> None:
            while not state["running"]:
                gevent.sleep(0.05)
            nxt = time.time()
            while not state["stop"]:
                nxt += 1.0
                gevent.sleep(max(0.0, nxt - time.time()))
                if state["stop"]:
                    break
                state["n"] += rate
                b = dict(template, sent_at=time.time(), total=state["n"])
                c.send(Message("vllm_batch", b, name))

        gevent.spawn(beat)
        gevent.spawn(batches)
        while not state["quit"]:
            msg = c.recv()
            if msg.type == "spawn":
                state["running"] = True
                c.send(Message("spawning", None, name))
                c.send(
                    Message(
                        "spawning_complete",
                        {
                            "user_classes_count": msg.data["user_classes_count"],
                            "user_count": sum(msg.data["user_classes_count"].values()),
                        },
                        name,
                    )
                )
            elif msg.type == "vllm_stop":
                state["stop"] = True
                if at_end:  # the records kept locally all along, sent now in chunks
                    left = state["n"]
                    while left > 0:
                        k = min(left, 20_000)
                        if k not in end_chunks:
                            end_chunks[k] = dict(_batch(name, k, 0, True), hists={}, health={})
                        c.send(
                            Message("vllm_batch", dict(end_chunks[k], worker=name, sent_at=time.time()), name)
                        )
                        left -= k
                fin = dict(
                    template, records="", n=0, cols=None, final=True, sent_at=time.time(), total=state["n"]
                )
                c.send(Message("vllm_batch", fin, name))
                sent[name] = state["n"]
            elif msg.type == "quit":
                state["quit"] = True
        c.close()

    gs = [gevent.spawn(worker, n) for n in names]
    gevent.joinall(gs, timeout=600)
    Path(out).write_text(json.dumps(sent))


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def one(n: int, rate: int, seconds: float, at_end: bool, drivers: int) -> dict[str, Any]:
    """One master with n synthetic workers sending `rate` records/s each for `seconds`."""
    port = free_port()
    run_dir = Path(tempfile.mkdtemp(prefix=f"master-{n}-"))
    exe = Path(sys.executable).with_name("locust")
    cmd = [
        *([str(exe)] if exe.exists() else [sys.executable, "-m", "locust"]),
        "-f",
        str(ROOT / "locustfiles" / "chat.py"),
        "--master",
        "--headless",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
        "--expect-workers",
        str(n),
        "-u",
        str(n),
        "-r",
        str(n * 10),
        "-t",
        f"{int(seconds)}s",
        "--host",
        "http://127.0.0.1:9",
        "--results-dir",
        str(run_dir),
        "--stop-timeout",
        "30",
        "--only-summary",
    ]
    if at_end:
        cmd.append("--records-at-end")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    log = open(run_dir / "master.log", "w")
    master = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    names = [f"syn{i:03d}" for i in range(n)]
    ctx = mp.get_context("spawn")
    outs = [str(run_dir / f"driver{d}.json") for d in range(drivers)]
    procs = [
        ctx.Process(target=_driver, args=(port, names[d::drivers], rate, at_end, outs[d]))
        for d in range(drivers)
    ]
    for p in procs:
        p.start()
    t0 = time.time()
    samples = []
    peak_rss = 0.0
    while master.poll() is None and time.time() - t0 < seconds + 300:
        c = cpu_seconds(master.pid)
        peak_rss = max(peak_rss, _rss_mb(master.pid))
        if c is not None:
            samples.append((time.time(), c))
        time.sleep(0.25)
    master.wait(timeout=60)
    t_end = time.time()
    for p in procs:
        p.join(30)
    ingest = (
        json.loads((run_dir / "master_ingest.json").read_text())
        if (run_dir / "master_ingest.json").exists()
        else {}
    )
    # the steady window: from 3 s after the first batch to the stop (CPU per wall second)
    steady = [s for s in samples if t0 + 8 <= s[0] <= t0 + 5 + seconds - 1]
    cpu = (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0]) if len(steady) > 2 else float("nan")
    from vllm_users.measure.records_store import load_columns

    lines = load_columns(str(run_dir)).n
    offered = n * rate
    return {
        "workers": n,
        "mode": "records-at-end" if at_end else "streamed",
        "offered_rec_s": offered,
        "records_ingested": lines,
        "ingested_rec_min": ingest.get("records", 0) / max(1.0, seconds) * 60 if not at_end else float("nan"),
        "master_cpu": cpu,
        "peak_rss_mb": peak_rss,
        "lag_p50_s": ingest.get("lag_p50_s"),
        "lag_p99_s": ingest.get("lag_p99_s"),
        "lag_max_s": ingest.get("lag_max_s"),
        "batch_cost_p99_ms": (ingest.get("batch_cost_p99_s") or 0) * 1000,
        "wall_s": t_end - t0,
        "rc": master.returncode,
        "run_dir": str(run_dir),
    }


def main(argv: list[str] | None = None) -> int:
    """Each worker count once; print the table, write results/master_ceiling.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="8,32,64,128")
    ap.add_argument("--rate", type=int, default=500, help="records per second per synthetic worker")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--drivers", type=int, default=max(1, min(8, (os.cpu_count() or 2) - 2)))
    ap.add_argument(
        "--records-at-end", action="store_true", help="also run each count in the records-at-end mode"
    )
    a = ap.parse_args(argv)
    rows = []
    for n in (int(x) for x in a.workers.split(",")):
        for at_end in [False, True] if a.records_at_end else [False]:
            r = one(n, a.rate, a.seconds, at_end, min(a.drivers, n))
            rows.append(r)
            print(
                f"  {n} workers {r['mode']}: {r['records_ingested']} records, master CPU {r['master_cpu']:.0%}, "
                f"lag p99 {r['lag_p99_s']} s, RSS {r['peak_rss_mb']:.0f} MB",
                flush=True,
            )
    print_table(
        rows,
        [
            "workers",
            "mode",
            "offered_rec_s",
            "records_ingested",
            "ingested_rec_min",
            "master_cpu",
            "peak_rss_mb",
            "lag_p50_s",
            "lag_p99_s",
            "lag_max_s",
            "batch_cost_p99_ms",
            "wall_s",
            "rc",
        ],
        f"one master, synthetic workers at {a.rate} records/s each, {a.seconds:.0f} s",
    )
    path = write_json("master_ceiling", {"rate_per_worker": a.rate, "seconds": a.seconds, "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
