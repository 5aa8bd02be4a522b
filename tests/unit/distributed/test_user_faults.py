"""The pure parts of the faults a user hits: a records write that fails (a full disk) stops the writing once and
says where, on the master and on a worker; user code's exceptions are named by type, message and line; a run whose
windows took every request says so instead of "no load request was sent"."""

from __future__ import annotations

from typing import Any

from tests.unit.measure.helpers import rec
from vllm_users import exit_codes
from vllm_users.distributed import user_errors
from vllm_users.distributed.run_end import note_faults, with_fault_warnings
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.transport.worker_side import WorkerContext
from vllm_users.measure.result_builder import build_run_result
from vllm_users.measure.result_notes import no_completed_reason
from vllm_users.options import build


class _Full:
    """A file on a full disk: every write and flush fails as the kernel says it."""

    name = "/full/records.jsonl"

    def write(self, _data: Any) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        raise OSError(28, "No space left on device")

    def close(self) -> None:
        raise OSError(28, "No space left on device")

    def tell(self) -> int:
        return 0


def _batch(n: int) -> dict[str, Any]:
    lines = "\n".join(rec(float(i), [10, 20], out=2).to_json() for i in range(n))
    return {"worker": "w0", "records": lines, "n": n, "hists": {}, "health": {}, "final": False, "totals": {}}


def test_the_master_says_which_write_failed_once_and_keeps_counting(tmp_path) -> None:
    c = Collector(str(tmp_path))
    c.on_batch(_batch(3))
    c.flush()
    c._fh = _Full()
    c.on_batch(_batch(2))
    assert c.write_error is not None and c.write_error.endswith(
        "records.jsonl failed: No space left on device"
    )
    assert str(tmp_path) in c.write_error
    c.on_batch(_batch(4))  # nothing more is written, but the batch is taken in (counts, histograms)
    assert c.unwritten == 6 and c.workers["w0"].records == 9
    c.close()  # no second failure, no exception
    assert (tmp_path / "records.jsonl").read_text().count("\n") == 3  # what was written stays


def test_a_worker_whose_local_file_fails_sends_its_records_on_and_says_so(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("VLLM_LOCUST_WORKER_DIR", str(tmp_path))
    ctx = WorkerContext(build(num_prompts=4), 0, 1, lambda m: None)
    ctx._file = _Full()
    ctx.submit(rec(0.0, [10, 20], out=2))  # never raises into the user's task
    ctx.submit(rec(1.0, [10, 20], out=2))
    assert ctx.write_error == "writing /full/records.jsonl failed: No space left on device"
    batch = ctx.take_batch()
    assert batch.n == 2 and batch.totals and batch.totals["write_error"] == ctx.write_error


def test_records_at_end_fall_back_to_the_batches_when_the_local_file_fails(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("VLLM_LOCUST_WORKER_DIR", str(tmp_path))
    ctx = WorkerContext(build(num_prompts=4, records_at_end=True), 0, 1, lambda m: None)
    ctx.submit(rec(0.0, [10, 20], out=2))  # kept in the local file
    assert ctx.take_batch().n == 0
    ctx._file = _Full()
    ctx.submit(rec(1.0, [10, 20], out=2))
    assert ctx.write_error and ctx.take_batch().n == 1  # not lost: in the next batch


def _raise(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as e:  # noqa: BLE001
        return e


def test_user_errors_are_named_by_type_message_and_line() -> None:
    e = _raise(ValueError("bad   prompt\nfor ticket 3"))
    kinds: list[dict[str, Any]] = []
    user_errors.add(kinds, e, e.__traceback__)
    user_errors.add(kinds, e, e.__traceback__)
    line_no = e.__traceback__.tb_next.tb_lineno if e.__traceback__.tb_next else e.__traceback__.tb_lineno
    want = {"type": "ValueError", "message": "bad prompt for ticket 3", "where": f"{__file__}:{line_no}"}
    assert kinds == [{**want, "user": True, "count": 2}]
    for i in range(user_errors.MAX_KINDS + 3):  # bounded: distinct messages beyond the cap are not kept
        user_errors.add(kinds, KeyError(i), None)
    assert len(kinds) == user_errors.MAX_KINDS
    merged = user_errors.merge([kinds[:1], [dict(kinds[0], count=5)]])
    assert merged[0]["count"] == 7
    line = user_errors.summary_line(merged)
    assert line is not None and line.startswith("user code raised ValueError: bad prompt for ticket 3 (")
    assert user_errors.summary_line([]) is None
    ours = user_errors.describe(e, None)  # no frame of the user's: not said to be the user's code
    assert ours["user"] is False and ours["where"] == "?"
    assert (user_errors.summary_line([ours]) or "").startswith(
        "a task (in vllm-locust's own code) raised ValueError"
    )


def test_a_run_whose_warmup_took_every_request_does_not_say_none_was_sent() -> None:
    recs = [rec(float(i), [10, 20], out=2) for i in range(5)]
    res = build_run_result(recs, {"date": "d", "warmup": "500r"})
    reason = no_completed_reason(res)
    assert reason is not None and "no load request was sent" not in reason
    assert "--warmup 500r took 5" in reason, reason


def test_the_faults_reach_the_result_with_their_exit_code(tmp_path) -> None:
    c = Collector(str(tmp_path))
    c.on_batch(_batch(3))
    c.workers["w0"].totals = {
        "user_errors": [{"type": "KeyError", "message": "'x'", "where": "u.py:3", "count": 2}]
    }
    meta: dict[str, Any] = {"date": "d"}
    code = note_faults(meta, c, "writing R/records.jsonl failed: File too large", "SIGTERM")
    assert code == exit_codes.INTERRUPTED  # the highest of 1 (user code), 10 (the write) and 130
    assert note_faults({}, c, "writing failed", None) == exit_codes.WRITE_FAILED
    recs = [rec(float(i), [10, 20], out=2) for i in range(2)]  # one of the 3 received never reached the disk
    res = with_fault_warnings(build_run_result(recs, meta), c)
    said = "\n".join(res.warnings)
    assert "interrupted by SIGTERM" in said and "user code raised KeyError: 'x' (u.py:3), 2 time(s)" in said
    assert (
        "writing R/records.jsonl failed: File too large: the run stopped" in said
        and "(1 received were" in said
    )
    c.close()
