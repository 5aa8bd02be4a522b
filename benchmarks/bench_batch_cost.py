"""Cost of one record batch, in isolation: master CPU per record and bytes per record on the wire (no zmq, no
Locust runner; benchmarks/bench_master.py measures a real master with synthetic workers).

A worker's WorkerContext takes finished RequestRecords (submit) and packs a batch (take_batch) as it does every
BATCH_INTERVAL_S; the batch is serialised as Locust sends it (rpc Message, msgpack), then the master decodes it
and its Collector.on_batch writes records.jsonl + columns and merges the histograms. Reported: records per
master CPU-second (decode + on_batch, time.process_time), bytes per record on the wire, and the worker's CPU
per record for the batch (submit + take_batch + serialise). No network, no Locust runner: the master's ceiling
for this data path; Locust's own heartbeats and stats are small beside it (one message per worker every 1-3 s).

    python benchmarks/bench_batch_cost.py [--records 20000] [--output-tokens 64,256,1024]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from locust.rpc.protocol import Message  # noqa: E402

from benchmarks.common import machine, print_table, write_json  # noqa: E402
from vllm_users.distributed.transport.master_side import Collector  # noqa: E402
from vllm_users.distributed.transport.messages import Batch  # noqa: E402
from vllm_users.distributed.transport.worker_side import BATCH_INTERVAL_S, WorkerContext  # noqa: E402
from vllm_users.measure.record import RequestRecord  # noqa: E402
from vllm_users.options import Options  # noqa: E402


def records(n: int, tokens: int, rng: random.Random) -> list[RequestRecord]:
    """Successful chat records with one chunk per token, TTFT ~100 ms and ITL ~10 ms (jittered)."""
    out, t0 = [], time.time()
    for i in range(n):
        t, chunks = rng.randint(50_000, 200_000), []
        for _ in range(tokens):
            chunks.append(t)
            t += rng.randint(5_000, 15_000)
        out.append(
            RequestRecord(
                scenario="chat",
                worker="w0",
                user=i % 256,
                seq=i,
                endpoint="chat",
                t_start=t0 + i * 0.01,
                chunk_times_us=chunks,
                end_us=t + 500,
                prompt_tokens=512,
                output_tokens=tokens,
                finish_reason="length",
                status=200,
                input_len=512,
                output_len=tokens,
            )
        )
    return out


def measure(n: int, tokens: int, batch_records: int) -> dict[str, float]:
    """Push n records of `tokens` output tokens through worker batches of `batch_records` into one master."""
    recs = records(n, tokens, random.Random(tokens))
    opts = Options()
    ctx = WorkerContext(opts, 0, 1, send=lambda *_: None)
    wire: list[bytes] = []
    c0 = time.process_time()
    for start in range(0, n, batch_records):
        for r in recs[start : start + batch_records]:
            ctx.submit(r)
        wire.append(Message(Batch.KIND, ctx.take_batch().to_payload(), "w0").serialize())
    worker_cpu = time.process_time() - c0
    with tempfile.TemporaryDirectory() as d:
        col = Collector(d)
        c0 = time.process_time()
        for blob in wire:
            msg = Message.unserialize(blob)
            col.on_batch(msg.data, msg.node_id)
        col.flush()
        master_cpu = time.process_time() - c0
        col.close()
    nbytes = sum(len(b) for b in wire)
    return {
        "output_tokens": tokens,
        "records": n,
        "batch_records": batch_records,
        "master_records_per_cpu_s": n / master_cpu,
        "master_tokens_per_cpu_s": n * tokens / master_cpu,
        "bytes_per_record": nbytes / n,
        "bytes_per_token": nbytes / (n * tokens),
        "worker_cpu_us_per_record": worker_cpu / n * 1e6,
    }


def main() -> None:
    """Run each output length, print the table, write benchmarks/results/master_ingest.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--output-tokens", default="64,256,1024")
    ap.add_argument(
        "--batch-records", type=int, default=500, help="records per batch (a worker's BATCH_INTERVAL_S)"
    )
    a = ap.parse_args()
    rows = [measure(a.records, int(t), a.batch_records) for t in a.output_tokens.split(",")]
    print_table(rows, list(rows[0]), f"master ingest (batches every {BATCH_INTERVAL_S} s per worker)")
    write_json("batch_cost", {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
