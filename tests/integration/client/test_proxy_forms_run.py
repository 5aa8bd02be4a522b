"""`vllm-locust run` through what proxies send (tests/unit/client/quirk_server.py), preflight included: JSON
re-serialized with spaces and usage on the last output event, a gzip body under `Text/Event-Stream; charset=UTF-8`,
and the server's own error messages, which must reach records.jsonl, result.json and the console summary."""

from __future__ import annotations

import pytest

from tests.integration.core.helpers import cli
from tests.unit.client.quirk_server import ERROR_MESSAGE, N_OUT, Quirks, serve_threaded

pytestmark = pytest.mark.timeout(200)

N = 20


def _run(tmp_path, quirks: Quirks, output_len: int = N_OUT, *extra: str, load: tuple[str, ...] = ()):
    """A run of 2 users against the quirk server: N prompts unless `load` says otherwise, then `extra`."""
    with serve_threaded(quirks) as srv:
        return cli(
            [
                "--host",
                f"http://127.0.0.1:{srv.port}",
                *(load or ("--num-prompts", str(N))),
                "--users",
                "2",
                "--workers",
                "1",
                "--output-len",
                str(output_len),
                *extra,
            ],
            str(tmp_path),
        )


@pytest.mark.parametrize(
    "quirks",
    [
        pytest.param(Quirks(spaced=True, usage_on_last=True, done=False), id="spaced-usage-on-last-no-done"),
        pytest.param(
            Quirks(encoding="gzip", content_type="Text/Event-Stream; charset=UTF-8", spaced=True), id="gzip"
        ),
    ],
)
def test_a_proxys_stream_is_measured_like_vllms(tmp_path, quirks: Quirks) -> None:
    r = _run(tmp_path, quirks)
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == N and res["failed"] == 0 and res["errors_by_kind"] == {}
    assert res["total_output_tokens"] == N * N_OUT  # usage read, not chunks counted
    assert res["tokens_estimated_requests"] == 0
    recs = r.records()
    assert all(x["finish_reason"] == "length" and len(x["chunk_times_us"]) == N_OUT for x in recs)
    if quirks.encoding:
        assert res["compressed_streams"] == {"gzip": N}
        assert all(x["extra"]["content_encoding"] == "gzip" for x in recs)
        assert "Compressed by the server (decoded):" in r.out and "gzip=20" in r.out
    else:
        assert "compressed_streams" not in res
    assert "Traceback" not in r.logs()


@pytest.mark.parametrize("error", ["event", "data", "json200"])
def test_the_servers_error_messages_reach_the_result_and_the_summary(tmp_path, error: str) -> None:
    r = _run(tmp_path, Quirks(error=error, error_after=1, spaced=True))
    assert r.rc == 1, r.logs()[-3000:]  # the run completed, its requests failed
    res = r.result
    assert res["failed"] == N and res["errors_by_kind"] == {"inband_error": N}
    assert res["error_messages"] == [{"kind": "inband_error", "message": ERROR_MESSAGE, "count": N}]
    assert all(x["error_detail"] == ERROR_MESSAGE for x in r.records())
    assert f"inband_error: {ERROR_MESSAGE}" in r.out, r.out[-2000:]
    assert "Traceback" not in r.logs()


def test_the_preflight_names_the_servers_error(tmp_path) -> None:
    r = _run(tmp_path, Quirks(error="json200"))
    assert r.rc == 3 and ERROR_MESSAGE in r.out + r.err, (r.out + r.err)[-2000:]


def test_plain_locust_reads_a_media_type_in_another_case(tmp_path) -> None:
    import csv
    import os
    import subprocess
    import sys

    with serve_threaded(Quirks(content_type="Text/Event-Stream; charset=UTF-8")) as srv:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                "locustfiles/chat.py",
                "--host",
                f"http://127.0.0.1:{srv.port}",
                "--headless",
                "-u",
                "2",
                "-r",
                "2",
                "-t",
                "60s",
                "--num-prompts",
                str(N),
                "--output-len",
                str(N_OUT),
                "--csv",
                str(tmp_path / "l"),
                "--only-summary",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "VLLM_LOCUST_RESULTS_DIR": str(tmp_path / "run")},
        )
    with open(tmp_path / "l_stats.csv") as fh:
        agg = next(r for r in csv.DictReader(fh) if r["Name"] == "Aggregated")
    assert p.returncode == 0 and int(agg["Failure Count"]) == 0, (p.stdout + p.stderr)[-2000:]
    assert int(agg["Request Count"]) == N


def test_a_gateway_that_pings_forever_ends_each_request_at_the_stall_timeout(tmp_path) -> None:
    """After 3 tokens only `: ping` every 100 ms: each request ends as stall_timeout with its 3 tokens, and the
    run ends by its prompt count (it never ended: the pings reset the read timeout)."""
    quirks = Quirks(ping_after=3, gap_s=0.1, error_after=1, ping_for_s=60)
    r = _run(tmp_path, quirks, N_OUT, "--stall-timeout", "1", load=("--num-prompts", "4"))
    assert r.rc in (0, 1), r.logs()[-3000:]  # a run of failures: its own exit code, not a hang
    res = r.result
    assert res["failed"] == 4 and res["errors_by_kind"] == {"stall_timeout": 4}
    recs = r.records()
    assert all(x["error"] == "stall_timeout" and len(x["chunk_times_us"]) == 3 for x in recs)
    assert all(x["output_tokens"] == 3 for x in recs)  # the tokens so far
    assert "stall_timeout" in r.out and "Traceback" not in r.logs()


def test_usage_below_the_chunks_is_counted_by_the_chunks_and_flagged(tmp_path) -> None:
    """16 one-token chunks, usage says 8: 16 tokens a request, 1.0 chunk per token, and result.json says why."""
    r = _run(tmp_path, Quirks(n_out=16, usage_tokens=8), 16)
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == N and res["total_output_tokens"] == N * 16
    assert res["chunk_token_ratio"] == pytest.approx(1.0)
    u = res["usage_below_chunks"]
    assert (u["requests"], u["usage_output_tokens"], u["chunk_output_tokens"]) == (N, N * 8, N * 16)
    assert u["count_used"] == "chunks" and u["why"]
    assert all(x["extra"]["usage_tokens"] == 8 and x["output_tokens"] == 16 for x in r.records())
    assert "Usage below chunks (chunks counted):" in r.out


def test_a_buffering_proxy_gives_no_tpot_or_itl_with_the_reason(tmp_path) -> None:
    """Every answer in one write: TTFT = E2EL, TPOT and ITL absent (never 0.00), and the summary says why."""
    r = _run(tmp_path, Quirks(n_out=16, at_once=True), 16)
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == N and res["total_output_tokens"] == N * 16
    assert not [k for k in res if "tpot" in k or "itl" in k], [k for k in res if "tpot" in k or "itl" in k]
    assert res["mean_ttft_ms"] == pytest.approx(res["mean_e2el_ms"])
    assert res["delivered_at_once"]["requests"] == N and "buffering proxy?" in res["delivered_at_once"]["why"]
    assert all(x["extra"]["chunks_at_once"] == 16 and len(x["chunk_times_us"]) == 1 for x in r.records())
    assert "TPOT and ITL absent: delivered at once: a buffering proxy?" in r.out
    assert "Traceback" not in r.logs()


def test_a_proxys_gzip_transfer_coding_is_named_in_each_failure(tmp_path) -> None:
    """`Transfer-Encoding: gzip, chunked` (the preflight's probe answered plain): every request fails as a
    bad_response that names the coding, never as "stream ended without [DONE]"."""
    r = _run(tmp_path, Quirks(transfer_coding="gzip", error_after=1), N_OUT)
    res = r.result
    assert res["completed"] == 0 and res["errors_by_kind"] == {"bad_response": N}, r.logs()[-3000:]
    msgs = res["error_messages"]
    assert [(m["kind"], m["message"], m["count"]) for m in msgs] == [
        ("bad_response", "server sent Transfer-Encoding: gzip, not asked for", N)
    ]
    assert "server sent Transfer-Encoding: gzip, not asked for" in r.out
    assert "without [DONE]" not in r.out and "Traceback" not in r.logs()


def test_a_run_time_ends_a_run_whose_streams_ping_forever_with_no_deadline(tmp_path) -> None:
    """Deadlines off (0), pings forever: --run-time and --stop-timeout still end the run, the streams counted as
    interrupted, and result.json is written."""
    quirks = Quirks(ping_after=3, gap_s=0.1, error_after=1, ping_for_s=90)
    deadlines_off = ("--stall-timeout", "0", "--request-timeout", "0", "--stop-timeout", "2")
    r = _run(tmp_path, quirks, N_OUT, *deadlines_off, load=("--run-time", "3s"))
    res = r.result
    assert res["completed"] == 0 and res["interrupted"] == 2, r.logs()[-3000:]
    assert "Traceback" not in r.logs()
