"""Master-side collection: records and histograms from every worker, lost workers, and the final result."""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vllm_users import run_dir
from vllm_users.atomic import atomic_json, release_reserve, reserve_space
from vllm_users.distributed.transport.messages import Batch
from vllm_users.distributed.transport.worker_side import BATCH_INTERVAL_S
from vllm_users.measure.health import bound, summarize
from vllm_users.measure.histograms import HistogramSet
from vllm_users.measure.record import parse_lines

log = logging.getLogger("vllm_locust")

SILENT_WORKER_S = 3.5  # a worker that sent no batch for this long is reported lost (until it sends again)
# held on the records' disk from the start, given back for the end-of-run files (result.json, histograms, ...):
# a disk the records fill still takes them (at most a quarter of the space free when the run starts)
END_FILES_RESERVE = 4 << 20


@dataclass
class WorkerState:
    """What the master knows about one worker's data."""

    name: str
    client_id: str | None = None
    records: int = 0
    last_batch: float = 0.0
    done: bool = False
    final: bool = False
    lost_at: float | None = None
    stalls_s: list[float] = field(default_factory=list)  # silences long enough to be reported, then survived
    totals: dict[str, Any] = field(default_factory=dict)


@dataclass
class Collector:
    """Receives worker batches, appends records to the run directory, merges histograms."""

    results_dir: str
    hists: HistogramSet = field(default_factory=HistogramSet)
    window: HistogramSet = field(default_factory=HistogramSet)  # since the last live snapshot (web UI charts)
    class_hists: HistogramSet = field(
        default_factory=HistogramSet
    )  # keyed by traffic class (runs with classes)
    # keyed by endpoint or replica (runs with several endpoints, or replicas named by --replica-header)
    group_hists: dict[str, HistogramSet] = field(default_factory=dict)
    workers: dict[str, WorkerState] = field(default_factory=dict)
    health: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None  # how the workers calibrated prompt lengths (run_meta.json)
    started: float = field(default_factory=time.time)
    _fh: Any = None
    _cols: Any = None
    _arrow: Any = None  # vllm_users.measure.records_arrow, imported by the master alone
    _jsonl_end: int = 0
    # ingest figures (master_ingest.json): each batch's age when it was taken in, and the time it took
    lag_s: list[float] = field(default_factory=list)
    batch_cost_s: list[float] = field(default_factory=list)
    batches: int = 0
    on_ingest: list[Callable[[Batch], None]] = field(default_factory=list)  # each batch, once taken in
    write_error: str | None = None  # the records' write that failed (a full disk): nothing more is written
    unwritten: int = 0  # records received after that failure (in the histograms and counts, not on disk)

    def __post_init__(self) -> None:
        os.makedirs(self.results_dir, exist_ok=True)
        path = run_dir.path(self.results_dir, run_dir.RECORDS)
        self._fh = open(path, "a", buffering=1 << 20)
        self._jsonl_end = os.path.getsize(path)
        # records.parquet (vllm_users.measure.records_store): each batch says where in the JSONL its records end
        # pyarrow is loaded here, not at import: the workers load this module too, and never write records.parquet
        from vllm_users.measure import records_arrow
        from vllm_users.measure.records_store import RecordsWriter

        self._arrow = records_arrow
        self._cols = RecordsWriter(self.results_dir)
        reserve_space(run_dir.path(self.results_dir, run_dir.RESERVE), END_FILES_RESERVE)

    def release_reserve(self) -> None:
        """Give the end-of-run files their reserved room (the records are all in, or no more can be written)."""
        release_reserve(run_dir.path(self.results_dir, run_dir.RESERVE))

    def on_batch(self, batch: Batch | dict[str, Any], client_id: str | None = None) -> None:
        """Add one worker batch (records as JSON lines, encoded histograms, health samples); a payload as Locust
        delivers it is read first."""
        t0 = time.perf_counter()
        b = batch if isinstance(batch, Batch) else Batch.from_payload(batch)
        w = self.workers.setdefault(b.worker, WorkerState(b.worker))
        w.client_id = client_id or w.client_id
        now = time.time()
        if (
            b.sent_at is not None
        ):  # clocks of remote hosts may differ: a figure for one host, a hint across hosts
            self.lag_s.append(now - float(b.sent_at))
        if w.lost_at is not None:  # it was only silent (a stalled process), and nothing it measured is lost
            log.warning("worker %s is back after %.1f s of silence", w.name, now - w.last_batch)
            w.stalls_s.append(round(now - w.last_batch, 3))
            w.lost_at = None
        w.last_batch = now
        w.totals = b.totals if b.totals is not None else w.totals
        if b.n:
            if self.write_error is None:
                self._append(b)
            else:
                self.unwritten += b.n
            w.records += b.n
        self.hists.merge_encoded(b.hists)
        self.window.merge_encoded(b.hists)
        if b.class_hists:
            self.class_hists.merge_encoded(b.class_hists)
        for grouping, encoded in (b.group_hists or {}).items():
            self.group_hists.setdefault(grouping, HistogramSet()).merge_encoded(encoded)
        if b.calibration and self.calibration is None:  # every worker calibrates alike: keep the first
            self.calibration = b.calibration
        h = self.health.setdefault(b.worker, {"cpu": [], "lag_ms": []})
        for k, v in b.health.items():
            h.setdefault(k, []).extend(v)
        bound(h)  # a long run keeps a fair sample of each worker's probes, not every one
        if b.final:
            w.final = True
            self.flush()
        for (
            hook
        ) in self.on_ingest:  # inside the timing: its cost is the ingest's (--prometheus-port's exporter)
            hook(b)
        self.batches += 1
        self.batch_cost_s.append(time.perf_counter() - t0)

    def _append(self, b: Batch) -> None:
        """One batch's records onto records.jsonl and the records' Arrow spool (records.parquet at the end)."""
        text = b.records
        try:
            self._fh.write(text + "\n")
        except OSError as e:
            self._failed(run_dir.RECORDS, e)
            self.unwritten += b.n
            return
        self._jsonl_end += (len(text) if text.isascii() else len(text.encode())) + 1
        try:
            torn = 0
            if b.cols:
                batch = self._arrow.batch_from_payload(b.cols)
            else:  # a batch that came without columns: its JSON lines
                recs, torn = parse_lines(io.StringIO(text))
                batch = self._arrow.batch_from_records(recs)
            self._cols.write(batch, self._jsonl_end, torn)
        except OSError as e:
            self._failed(run_dir.SPOOL, e)
        except Exception:  # records.jsonl has them; the reader parses what the columns lack
            log.exception("vllm-locust: columns of a batch from %s not written", b.worker)

    def _failed(self, name: str, e: OSError) -> None:
        """A write of the records failed (a full disk, a file size limit): said once; what reached the disk stays,
        nothing more is written (the master stops the run)."""
        if self.write_error is None:
            self.write_error = f"writing {run_dir.path(self.results_dir, name)} failed: {e.strerror or e}"
            log.error("vllm-locust: %s", self.write_error)
        try:
            if self._fh is not None:
                self._fh.close()
        except OSError:  # its buffer cannot be written either: that is the failure above
            pass
        if self._fh is not None:
            whole_lines(run_dir.path(self.results_dir, run_dir.RECORDS))
        if self._cols is not None:
            self._cols.abandon()  # the spool keeps what reached the disk; no records.parquet is made
        self._fh = self._cols = None

    def ingest_summary(self) -> dict[str, Any]:
        """Batches and records taken in, batch age at intake (lag) and per-batch cost, in seconds."""

        def q(xs: list[float], p: float) -> float | None:
            return round(sorted(xs)[min(len(xs) - 1, int(p * len(xs)))], 6) if xs else None

        return {
            "batches": self.batches,
            "records": sum(w.records for w in self.workers.values()),
            "workers": len(self.workers),
            "lag_p50_s": q(self.lag_s, 0.5),
            "lag_p99_s": q(self.lag_s, 0.99),
            "lag_max_s": round(max(self.lag_s), 6) if self.lag_s else None,
            "batch_cost_p50_s": q(self.batch_cost_s, 0.5),
            "batch_cost_p99_s": q(self.batch_cost_s, 0.99),
            "batch_cost_total_s": round(sum(self.batch_cost_s), 3),
        }

    def on_done(self, worker: str) -> None:
        """A worker used up its share of the requests."""
        self.workers.setdefault(worker, WorkerState(worker)).done = True

    def mark_lost(self, client_id: str, now: float) -> WorkerState | None:
        """A worker stopped answering: keep the window in which its data may be missing."""
        for w in self.workers.values():
            if w.client_id == client_id and w.lost_at is None and not w.final:
                w.lost_at = now
                log.error(
                    "worker %s lost (no heartbeat); samples after %s may be missing (%d records received)",
                    w.name,
                    time.strftime("%H:%M:%S", time.localtime(w.last_batch)),
                    w.records,
                )
                return w
        return None

    def live(self) -> list[WorkerState]:
        """Workers neither lost nor finished."""
        return [w for w in self.workers.values() if w.lost_at is None and not w.final]

    def progress(self) -> dict[str, Any]:
        """Live totals over all workers, for the progress line."""
        tot: dict[str, float] = {"ok": 0, "failed": 0, "output_tokens": 0, "inflight": 0, "e2el_sum_s": 0.0}
        for w in self.workers.values():
            for k in tot:
                tot[k] += w.totals.get(k, 0)
        elapsed = time.time() - self.started
        tot["elapsed_s"] = round(elapsed, 1)
        tot["output_tok_per_s"] = round(tot["output_tokens"] / elapsed, 1) if elapsed > 0 else 0.0
        tot["workers_live"] = len(self.live())
        out: dict[str, Any] = {
            **tot,
            "workers_lost": [w.name for w in self.workers.values() if w.lost_at is not None],
        }
        for k, row in self.hists.summary_ms((50, 99)).items():
            scen, _, metric = k.rpartition("|")
            if metric in ("ttft", "tpot"):
                out[f"{scen}_{metric}_p50_ms"] = round(row["p50"], 2)
                out[f"{scen}_{metric}_p99_ms"] = round(row["p99"], 2)
        return out

    def write_progress(self, results_dir: str) -> None:
        """progress.json: the live totals and each scenario's TTFT/TPOT p50 and p99 (a failure: `write_error`;
        after one, nothing: the disk's room is for the end-of-run files)."""
        if self.write_error is not None:
            return
        path = run_dir.path(results_dir, run_dir.PROGRESS)
        try:
            atomic_json(path, self.progress())
        except OSError as e:  # a full disk: the run stops for it (the master's watch)
            self.write_error = self.write_error or f"writing {path} failed: {e.strerror or e}"

    def mark_unanswering(self, known: set[str], missing: set[str], now: float) -> None:
        """Mark lost every live worker whose client Locust no longer knows or calls missing, or that sent no
        batch for SILENT_WORKER_S (batches are due every second)."""
        for w in list(self.workers.values()):
            cid = w.client_id or ""
            silent = now - w.last_batch > SILENT_WORKER_S
            if w.lost_at is None and not w.final and (cid not in known or cid in missing or silent):
                self.mark_lost(cid, now)

    def none_left(self, seconds: float, now: float) -> str | None:
        """Why no worker is left to wait for: "lost" when one went missing without its final batch (the run is
        cut short), "ended" when every worker sent its final batch (a stop that is under way: nothing is wrong);
        None while a worker is live, or has been silent for less than `seconds`, or before any worker."""
        if not self.workers or self.live() or not self.all_silent(seconds, now):
            return None
        return (
            "lost" if any(w.lost_at is not None and not w.final for w in self.workers.values()) else "ended"
        )

    def all_silent(self, seconds: float, now: float) -> bool:
        """Every worker that has not sent its final batch has been silent for `seconds`."""
        return all(now - w.last_batch > seconds for w in self.workers.values() if not w.final)

    def flush(self) -> None:
        """Make everything received visible on disk (a failure: `write_error`)."""
        for name, attr in ((run_dir.RECORDS, "_fh"), (run_dir.SPOOL, "_cols")):
            fh = getattr(self, attr)  # a failure closes both
            try:
                if fh is not None:
                    fh.flush()
            except OSError as e:
                self._failed(name, e)

    def close(self) -> None:
        """Flush and close the records files; the spool becomes records.parquet (a failure: `write_error`). The
        room held for the end-of-run files is given back once the records are flushed (they come next)."""
        self.flush()
        self.release_reserve()
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._cols is not None:
            cols, self._cols = self._cols, None
            try:
                cols.close()
            except OSError as e:  # a full disk: the spool stays, and the reader reads it
                self.write_error = self.write_error or f"writing {run_dir.PARQUET} failed: {e.strerror or e}"
                log.error("vllm-locust: %s", self.write_error)

    def loss_report(self) -> dict[str, Any]:
        """Workers lost mid-run, each with its window of possible loss."""
        lost = [w for w in self.workers.values() if w.lost_at is not None or not w.final]
        return {
            "workers_lost": [
                {
                    "worker": w.name,
                    "records_received": w.records,
                    "last_data_at": w.last_batch,
                    "lost_at": w.lost_at,
                    # batches come every BATCH_INTERVAL_S: data after the last one, up to the first one
                    # that never came, is what may be missing
                    "possible_loss_window_s": round(
                        min((w.lost_at or time.time()) - w.last_batch, 2 * BATCH_INTERVAL_S), 3
                    ),
                }
                for w in lost
            ],
            "complete": not lost,
            "worker_stalls_s": {w.name: w.stalls_s for w in self.workers.values() if w.stalls_s},
        }

    def write_side_files(self) -> None:
        """Merged histograms and client health, beside the records."""
        atomic_json(run_dir.path(self.results_dir, run_dir.HISTOGRAMS), self.hists.encode())
        atomic_json(run_dir.path(self.results_dir, run_dir.CLIENT_HEALTH), summarize(self.health))
        atomic_json(run_dir.path(self.results_dir, run_dir.MASTER_INGEST), self.ingest_summary())


def whole_lines(path: str) -> None:
    """Cut the file `path` after its last newline: a record line a failed write tore is gone, whole lines stay
    (the records received and not on disk are counted by the result's warning)."""
    try:
        with open(path, "rb+") as fh:
            end = fh.seek(0, os.SEEK_END)
            pos = end
            while pos > 0:
                start = max(0, pos - (1 << 16))
                fh.seek(start)
                cut = fh.read(pos - start).rfind(b"\n")
                if cut >= 0:
                    pos = start + cut + 1
                    break
                pos = start
            if pos < end:
                fh.truncate(pos)
    except OSError as e:  # the reader skips a torn last line and counts it
        log.warning("vllm-locust: could not cut the torn end of %s: %s", path, e)
