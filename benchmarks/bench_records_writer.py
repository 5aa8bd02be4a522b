"""The master's cost per record of writing the records: today's writer against the one before it, interleaved.

The master's Collector.on_batch takes each worker batch (JSON lines and packed columns, as WorkerContext sends
them) and writes it; `close` ends the run. Four writers, each a Collector, take the same batches in turn, round
after round (A B C D, B C D A, ...), so that a busy machine slows each alike:

- `jsonl+parquet`: today's (records.jsonl, and the Arrow spool that becomes records.parquet at close);
- `jsonl+cols`: the writer before it (records.jsonl and records.cols' VLC1 frames), kept here as it was;
- `jsonl`: records.jsonl alone (its share of either);
- `parquet`: the spool and records.parquet alone (what the master would pay without records.jsonl).

Reported per writer: the master's CPU per record (time.process_time over every on_batch and the close, the
median of the rounds), the close alone, and the bytes on disk per record. Histograms are left out of the
batches: they cost the same with every writer.

    python benchmarks/bench_records_writer.py [--records 50000] [--batch 500] [--tokens 64,256] [--rounds 5]

writes benchmarks/results/bench_records_writer.json.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_batch_cost import records  # noqa: E402
from benchmarks.common import machine, print_table, write_json  # noqa: E402
from vllm_users import run_dir  # noqa: E402
from vllm_users.distributed.transport.master_side import Collector  # noqa: E402
from vllm_users.distributed.transport.messages import Batch  # noqa: E402
from vllm_users.measure.columns import frame, pack_records  # noqa: E402
from vllm_users.measure.record import RequestRecord  # noqa: E402


class ColsCollector(Collector):
    """The writer before records.parquet: records.jsonl and records.cols (VLC1 frames), as it was."""

    def __post_init__(self) -> None:
        os.makedirs(self.results_dir, exist_ok=True)
        self._fh = open(run_dir.path(self.results_dir, run_dir.RECORDS), "a", buffering=1 << 20)
        self._cols = open(run_dir.path(self.results_dir, run_dir.COLS), "ab", buffering=1 << 20)

    def _append(self, b: Batch) -> None:
        text = b.records
        self._fh.write(text + "\n")
        self._jsonl_end += (len(text) if text.isascii() else len(text.encode())) + 1
        self._cols.write(frame(b.cols or b"", self._jsonl_end))

    def flush(self) -> None:
        self._fh.flush()
        self._cols.flush()

    def close(self) -> None:
        self._fh.close()
        self._cols.close()


class JsonlCollector(ColsCollector):
    """records.jsonl alone."""

    def __post_init__(self) -> None:
        os.makedirs(self.results_dir, exist_ok=True)
        self._fh = open(run_dir.path(self.results_dir, run_dir.RECORDS), "a", buffering=1 << 20)

    def _append(self, b: Batch) -> None:
        self._fh.write(b.records + "\n")

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class ParquetOnlyCollector(Collector):
    """Today's spool and records.parquet without records.jsonl (its file object writes nowhere)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._fh.close()
        os.unlink(run_dir.path(self.results_dir, run_dir.RECORDS))
        self._fh = open(os.devnull, "w")


WRITERS: dict[str, type[Collector]] = {
    "jsonl+parquet": Collector,
    "jsonl+cols": ColsCollector,
    "jsonl": JsonlCollector,
    "parquet": ParquetOnlyCollector,
}


def batches(recs: list[RequestRecord], size: int) -> list[dict[str, Any]]:
    """The worker batches of `recs` (JSON lines and packed columns), built once: the worker is not measured."""
    out = []
    for i in range(0, len(recs), size):
        part = recs[i : i + size]
        out.append(
            {
                "worker": f"w{i // size % 8}",
                "records": "\n".join(r.to_json() for r in part),
                "n": len(part),
                "cols": pack_records(part),
                "hists": {},
                "health": {},
                "final": False,
            }
        )
    return out


def one(kind: type[Collector], bs: list[dict[str, Any]], where: str) -> tuple[float, float, int]:
    """(CPU s for every batch and the close, CPU s of the close, bytes written) of one writer on `bs`."""
    d = tempfile.mkdtemp(dir=where)
    try:
        decoded = [Batch.from_payload(b) for b in bs]
        t0 = time.process_time()
        col = kind(d)
        for b in decoded:
            col.on_batch(b)
        t1 = time.process_time()
        col.close()
        t2 = time.process_time()
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        return t2 - t0, t2 - t1, size
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    """Run the rounds and print the table; the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=50_000, help="Records per writer and round")
    p.add_argument("--batch", type=int, default=500, help="Records per worker batch (one worker's second)")
    p.add_argument("--tokens", default="64,256", help="Chunks per record, comma-separated shapes")
    p.add_argument("--rounds", type=int, default=5, help="Interleaved rounds (the median is reported)")
    p.add_argument("--workdir", default=None, help="Where the files are written (default: a temporary dir)")
    a = p.parse_args()
    where = a.workdir or tempfile.mkdtemp(prefix="bench-writer-")
    rows, out = [], []
    names = list(WRITERS)
    for tokens in (int(t) for t in a.tokens.split(",")):
        bs = batches(records(a.records, tokens, random.Random(tokens)), a.batch)
        runs: dict[str, list[tuple[float, float, int]]] = {n: [] for n in names}
        for rnd in range(a.rounds):
            for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
                runs[name].append(one(WRITERS[name], bs, where))
        for name in names:
            per = [c / a.records * 1e6 for c, _cl, _s in runs[name]]
            close = statistics.median(cl for _c, cl, _s in runs[name]) / a.records * 1e6
            size = runs[name][0][2] / a.records
            rows.append(
                {
                    "chunks": tokens,
                    "writer": name,
                    "us/record": f"{statistics.median(per):.2f}",
                    "range": f"{min(per):.2f}-{max(per):.2f}",
                    "of it: close": f"{close:.2f}",
                    "bytes/record": f"{size:,.0f}",
                }
            )
            out.append(
                {
                    "tokens": tokens,
                    "writer": name,
                    "cpu_us_per_record": statistics.median(per),
                    "runs_us_per_record": per,
                    "close_us_per_record": close,
                    "bytes_per_record": size,
                }
            )
    cols = ["chunks", "writer", "us/record", "range", "of it: close", "bytes/record"]
    print_table(rows, cols, "master CPU per record, median of the rounds (us)")
    write_json(
        "bench_records_writer",
        {"machine": machine(), "records": a.records, "batch": a.batch, "rounds": a.rounds, "rows": out},
    )
    if not a.workdir:
        shutil.rmtree(where, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
