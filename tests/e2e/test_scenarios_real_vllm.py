"""Every scenario against real vLLM through `vllm-locust run --workers 2` (short runs, one shared server).

The tiny random-weight model does not finish valid JSON or valid tool arguments, so the json and tools
tests do not ask for valid answers: they put a recording proxy between the load tester and vLLM and check
that our verdicts equal an independent verdict (json.loads + jsonschema) on the very same responses.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.e2e.speed import communicate_progressing, scaled
from tests.e2e.vllm_env import client_preexec
from vllm_users.measure.record import RequestRecord, read_records
from vllm_users.scenarios.registry import SCENARIOS

REPO = Path(__file__).resolve().parents[2]
# 0 ok; 1 some requests failed (json/tools: invalid answers); 5 client-bound: on this shared 2-core box
# a worker's loop lag passes the threshold now and then, which says nothing about correctness
OK_CODES = (0, 5)


@dataclass
class RunOutput:
    code: int
    result: dict[str, Any]
    records: list[RequestRecord]
    run_dir: Path
    stdout: str = ""


def run_vllm_locust(
    host: str,
    out_dir: Path,
    name: str,
    *args: str,
    ok_codes: tuple[int, ...] = OK_CODES,
    stall_s: float | None = None,
) -> RunOutput:
    """`vllm-locust run --host HOST --workers 2 ... --no-report`; the result JSON and the records.
    It runs for as long as vLLM at HOST makes progress (speed.communicate_progressing); once its counters
    stand still for stall_s seconds (default: speed.STALL_S scaled by the machine's measured speed): SIGINT
    (the CLI stops its master and workers), then SIGKILL to every PID in pids.json."""
    if "--workers" not in args:
        args = ("--workers", "2", *args)
    argv = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--host",
        host,
        "--output-dir",
        str(out_dir),
        "--run-name",
        name,
        "--no-report",
        "--quiet",
        *args,
    ]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=client_preexec(),
    )
    try:
        stdout = communicate_progressing(proc, host, stall_s)
    except subprocess.TimeoutExpired as e:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        _kill_leftovers(out_dir / name / "pids.json")
        raise AssertionError(
            f"vllm-locust run {name}: vLLM made no progress for {e.timeout:.0f} s (its counters stood still)"
        ) from None
    proc = subprocess.CompletedProcess(argv, proc.returncode, stdout, "")
    out = proc.stdout + proc.stderr
    run_dir = out_dir / name
    assert proc.returncode in ok_codes, f"exit {proc.returncode}\n{out[-4000:]}"
    assert "Traceback" not in out, out[-4000:]
    for log in run_dir.glob("*.out"):
        assert "Traceback" not in log.read_text(errors="replace"), f"{log}:\n{log.read_text()[-3000:]}"
    result = json.loads((run_dir / "result.json").read_text())
    records, bad = read_records(str(run_dir / "records.jsonl"))
    assert bad == 0
    return RunOutput(proc.returncode, result, records, run_dir, out)


def _kill_leftovers(pids_file: Path) -> None:
    try:
        doc = json.loads(pids_file.read_text())
    except (OSError, ValueError):
        return
    pids = [v for v in (doc.values() if isinstance(doc, dict) else doc) if isinstance(v, int)]
    pids += [
        p
        for v in (doc.values() if isinstance(doc, dict) else [])
        if isinstance(v, list)
        for p in v
        if isinstance(p, int)
    ]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def assert_monotonic(records: list[RequestRecord]) -> None:
    """Chunk times never go back in time and the body ends after the last chunk (else TPOT/ITL < 0)."""
    bad = [
        (rec.seq, rec.chunk_times_us[:3], rec.chunk_times_us[-3:])
        for rec in records
        if any(b < a for a, b in zip(rec.chunk_times_us, rec.chunk_times_us[1:], strict=False))
        or (rec.chunk_times_us and rec.end_us < rec.chunk_times_us[-1])
    ]
    assert not bad, f"{len(bad)} of {len(records)} records have chunk times out of order, e.g. {bad[:3]}"


def require_scenario(name: str) -> None:
    if name not in SCENARIOS:
        pytest.skip(f"scenario {name!r} is not registered in vllm_users/scenarios/registry.py yet")


# ----- a recording reverse proxy: forwards every byte as it arrives and keeps each exchange -----
@dataclass
class Exchange:
    method: str
    path: str
    request: bytes
    status: int
    response: bytes = b""


@dataclass
class RecordingProxy:
    upstream_host: str
    upstream_port: int
    exchanges: list[Exchange] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def chat_posts(self, key: str) -> list[tuple[dict[str, Any], Exchange]]:
        """(request body, exchange) of every chat POST whose body has `key`."""
        out = []
        for ex in self.exchanges:
            if ex.method == "POST" and ex.path == "/v1/chat/completions":
                body = json.loads(ex.request)
                if key in body:
                    out.append((body, ex))
        return out


def _proxy_handler(proxy: RecordingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            req = self.rfile.read(n) if n else b""
            skip = ("host", "connection", "content-length", "keep-alive")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
            conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=scaled(300))
            try:
                conn.request(self.command, self.path, body=req or None, headers=headers)
                resp = conn.getresponse()
                ex = Exchange(self.command, self.path, req, resp.status)
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in (
                        "transfer-encoding",
                        "content-length",
                        "connection",
                        "date",
                        "server",
                    ):
                        self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                data = bytearray()
                while chunk := resp.read1(65536):
                    data += chunk
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                ex.response = bytes(data)
                proxy.exchanges.append(ex)
            finally:
                conn.close()

    return Handler


@pytest.fixture
def recording_proxy(vllm_server_details):
    proxy = RecordingProxy(vllm_server_details.host, vllm_server_details.port)
    proxy.server = ThreadingHTTPServer(("127.0.0.1", 0), _proxy_handler(proxy))
    proxy.server.daemon_threads = True
    t = threading.Thread(target=proxy.server.serve_forever, daemon=True)
    t.start()
    yield proxy
    proxy.server.shutdown()
    proxy.server.server_close()


# ----- independent reading of a captured stream -----
def sse_events(raw: bytes) -> list[dict[str, Any]]:
    """Every JSON event of an SSE body (the [DONE] sentinel left out), parsed with json.loads."""
    out = []
    for block in raw.decode().split("\n\n"):
        block = block.strip()
        if block.startswith("data:") and block[5:].strip() != "[DONE]":
            out.append(json.loads(block[5:]))
    return out


@dataclass
class Answer:
    text: str
    calls: dict[int, dict[str, str]]
    completion_tokens: int | None
    finish_reason: str | None


def read_answer(raw: bytes) -> Answer:
    text, calls, tokens, finish = [], {}, None, None
    for ev in sse_events(raw):
        if ev.get("usage"):
            tokens = ev["usage"].get("completion_tokens")
        for ch in ev.get("choices") or []:
            delta = ch.get("delta") or {}
            text.append(delta.get("content") or "")
            for tc in delta.get("tool_calls") or []:
                c = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                fn = tc.get("function") or {}
                c["name"] += fn.get("name") or ""
                c["arguments"] += fn.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    return Answer("".join(text), calls, tokens, finish)


def _chars_from_detail(detail: str | None) -> int | None:
    m = re.search(r"not JSON \((\d+) chars", detail or "")
    return int(m.group(1)) if m else None


def _first_tool_name(seed: int) -> str:
    """The first tool the tools scenario offers for `seed`. In a child process: vllm_users.scenarios.tools_user imports
    locust, which monkey-patches this process with gevent (deadlocks the recording proxy's threads)."""
    code = f"from vllm_users.scenarios.tools_user import make_tools; print(make_tools({seed})[0]['function']['name'])"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.strip().splitlines()[-1]


# ----- the tests -----
LENS = ("--input-len", "64", "--output-len", "32")


def test_chat(vllm_server_details, tmp_path):
    require_scenario("chat")
    n = 16
    run = run_vllm_locust(
        vllm_server_details.url,
        tmp_path,
        "chat",
        "--scenario",
        "chat",
        "--users",
        "4",
        "--num-prompts",
        str(n),
        *LENS,
        "--ignore-eos",
        "--seed",
        "11",
    )
    r = run.result
    assert (r["completed"], r["failed"]) == (n, 0), r.get("errors_by_kind")
    assert r["total_output_tokens"] == n * 32
    assert sorted(rec.output_tokens for rec in run.records) == [32] * n
    assert {rec.worker for rec in run.records}.__len__() == 2  # both workers sent requests
    assert all(rec.tokens_estimated is False and rec.ttft_s and rec.ttft_s > 0 for rec in run.records)
    assert_monotonic(run.records)
    assert r["median_ttft_ms"] > 0 and r["median_tpot_ms"] > 0
    assert r["total_input_tokens"] == sum(rec.prompt_tokens or 0 for rec in run.records) > 0


def test_json_verdicts_match_independent_parse(recording_proxy, tmp_path):
    require_scenario("json")
    n = 8
    run = run_vllm_locust(
        recording_proxy.url,
        tmp_path,
        "json",
        "--scenario",
        "json",
        "--users",
        "4",
        "--num-prompts",
        str(n),
        *LENS,
        "--seed",
        "12",
        "--no-server-metrics",
        ok_codes=(0, 1, 5),
    )
    captured = recording_proxy.chat_posts("response_format")
    assert len(captured) == len(run.records) == n
    ours, theirs = [], []
    for rec in run.records:
        assert rec.valid is not None
        assert rec.error in (None, "invalid_json"), (rec.error, rec.error_detail)
        ours.append(
            (
                rec.valid,
                rec.output_tokens,
                rec.finish_reason,
                None if rec.valid else _chars_from_detail(rec.error_detail),
            )
        )
    for body, ex in captured:
        assert ex.status == 200 and body["stream"] is True
        schema = body["response_format"]["json_schema"]["schema"]
        ans = read_answer(ex.response)
        stripped = ans.text.strip()
        try:
            value = json.loads(stripped)
        except ValueError:
            theirs.append((False, ans.completion_tokens, ans.finish_reason, len(stripped) or None))
            continue
        valid = jsonschema.Draft202012Validator(schema).is_valid(value)
        theirs.append((valid, ans.completion_tokens, ans.finish_reason, None))
    # an empty answer has no char count in our detail ("empty answer"): compare those as None
    ours = [(v, t, f, c if c else None) for v, t, f, c in ours]
    assert Counter(ours) == Counter(theirs)
    valid = sum(1 for t in theirs if t[0])
    assert run.result["validity_rate"] == pytest.approx(valid / n)
    print(f"\njson: {valid}/{n} valid by both (random-weight model), verdicts identical")


def test_tools_named_choice_verdicts_match_independent_parse(recording_proxy, tmp_path):
    require_scenario("tools")
    seed = 13
    choice = _first_tool_name(seed)
    n = 8
    run = run_vllm_locust(
        recording_proxy.url,
        tmp_path,
        "tools",
        "--scenario",
        "tools",
        "--users",
        "4",
        "--num-prompts",
        str(n),
        *LENS,
        "--seed",
        str(seed),
        "--tool-choice",
        choice,
        "--no-server-metrics",
        ok_codes=(0, 1, 5),
    )
    captured = recording_proxy.chat_posts("tools")
    assert len(captured) == len(run.records) == n
    ours = []
    for rec in run.records:
        assert rec.valid is not None
        assert rec.error in (None, "invalid_tool_call"), (rec.error, rec.error_detail)
        ours.append((rec.valid, rec.output_tokens, rec.finish_reason))
    theirs, named_calls = [], 0
    for body, ex in captured:
        assert ex.status == 200
        assert body["tool_choice"] == {"type": "function", "function": {"name": choice}}
        params = {t["function"]["name"]: t["function"].get("parameters") or {} for t in body["tools"]}
        ans = read_answer(ex.response)
        named_calls += sum(1 for c in ans.calls.values() if c["name"] == choice)
        valid = bool(ans.calls)
        for c in ans.calls.values():
            if c["name"] != choice:
                valid = False
                break
            try:
                args = json.loads(c["arguments"])
            except ValueError:
                valid = False
                break
            valid = valid and jsonschema.Draft202012Validator(params[choice]).is_valid(args)
        theirs.append((valid, ans.completion_tokens, ans.finish_reason))
    assert Counter(ours) == Counter(theirs)
    assert named_calls >= n  # vLLM honoured the named choice: every answer is a call of that tool
    print(f"\ntools: {sum(t[0] for t in theirs)}/{n} valid by both (random-weight model), verdicts identical")


def test_multi_turn_reports_cached_tokens(vllm_server_details, tmp_path):
    require_scenario("multi-turn")
    n = 24
    run = run_vllm_locust(
        vllm_server_details.url,
        tmp_path,
        "mt",
        "--scenario",
        "multi-turn",
        "--users",
        "4",
        "--num-prompts",
        str(n),
        "--num-turns",
        "3",
        "--prefix-len",
        "256",
        "--cache-rate",
        "1",
        *LENS,
        "--ignore-eos",
        "--seed",
        "14",
    )
    r = run.result
    assert (r["completed"], r["failed"]) == (n, 0), r.get("errors_by_kind")
    assert r["cached_tokens_reported"] is True
    by_turn: dict[int, list[RequestRecord]] = {}
    for rec in run.records:
        assert rec.turn is not None and rec.cached_tokens is not None
        by_turn.setdefault(rec.turn, []).append(rec)
    assert sorted(by_turn) == [0, 1, 2]
    # turn k >= 1 resends turn k-1's prompt and answer: at least one 128-token block of it is cached
    for turn in (1, 2):
        assert all((rec.cached_tokens or 0) >= 128 for rec in by_turn[turn]), [
            rec.cached_tokens for rec in by_turn[turn]
        ]
    # later turns reuse more
    mean = {t: sum(rec.cached_tokens or 0 for rec in rs) / len(rs) for t, rs in by_turn.items()}
    assert mean[2] > mean[1] > mean[0]
    assert r["prefix_cache_hit_rate"] > 0.3
    print(f"\nmulti-turn: mean cached tokens by turn {mean}, hit rate {r['prefix_cache_hit_rate']:.2f}")


def test_burst(vllm_server_details, tmp_path):
    require_scenario("burst")
    run = run_vllm_locust(
        vllm_server_details.url,
        tmp_path,
        "burst",
        "--scenario",
        "burst",
        "--users",
        "6",
        "--burst-quiet-users",
        "1",
        "--burst-quiet",
        "2",
        "--burst-spike",
        "4",
        "--burst-recover",
        "2",
        *LENS,
        "--ignore-eos",
        "--seed",
        "15",
    )
    r = run.result
    assert r["failed"] == 0, r.get("errors_by_kind")
    assert r["completed"] == len(run.records) > 0
    assert {rec.scenario for rec in run.records} == {"burst"}
    spans = sorted((rec.t_start, rec.t_start + rec.end_us / 1e6) for rec in run.records)
    t0 = spans[0][0]

    def inflight(t: float) -> int:
        return sum(1 for a, b in spans if a <= t < b)

    starts = [a for a, _ in spans]
    quiet = [inflight(a) for a in starts if a - t0 < 1.5]
    peak = max(inflight(a) for a in starts)
    assert quiet and max(quiet) == 1  # one user while quiet: one request at a time
    assert peak >= 4  # the spike's six users overlap
    assert r["max_concurrent_requests"] >= 4
    print(f"\nburst: {r['completed']} requests, peak in flight {peak}, duration {r['duration']:.1f} s")
