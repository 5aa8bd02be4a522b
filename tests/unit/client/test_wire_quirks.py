"""Wire framings that real servers and proxies send, through both stream readers and every other client:
a stream that ends its chunked body cleanly after finish_reason and usage but without `data: [DONE]` is a
complete answer (vLLM bench counts it a success; we too, flagged as missing [DONE]); a body torn without a
finish_reason, or cut in the middle of a chunk, stays `truncated`; interim 1xx responses (100 Continue, 103
Early Hints, several, with headers) before the final one are skipped (RFC 9110 §15.2), 101 is not."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator

import gevent
import pytest
from geventhttpclient import HTTPClient

from orchestration.server.metrics_sampler import ServerMetricsSampler
from orchestration.server.preflight import PreflightError, check_server
from tests.unit.client.quirk_server import (
    CONTINUE,
    EARLY_HINTS,
    MODEL,
    N_OUT,
    Quirks,
    QuirkServer,
    serve_gevent,
    serve_threaded,
)
from tests.unit.measure.helpers import rec
from vllm_users.client import ghc_adapter, stream
from vllm_users.client.reactor import HAVE_EPOLL, reactor
from vllm_users.client.wire import StampedResponse
from vllm_users.distributed.server_profile import _post as profile_post
from vllm_users.measure.columns import _merge, _unpack, pack_records
from vllm_users.measure.result_fields import compute_metrics

pytestmark = pytest.mark.timeout(60)

READERS = [
    pytest.param(True, id="reactor", marks=pytest.mark.skipif(not HAVE_EPOLL, reason="no epoll")),
    pytest.param(False, id="greenlet"),
]
ENDPOINTS = [
    pytest.param("/v1/chat/completions", id="chat"),
    pytest.param("/v1/completions", id="completions"),
]
INTERIMS = [
    pytest.param((CONTINUE,), True, id="100"),
    pytest.param((EARLY_HINTS,), True, id="103"),
    pytest.param((CONTINUE, EARLY_HINTS, EARLY_HINTS), True, id="100-103-103-apart"),
    pytest.param((CONTINUE, EARLY_HINTS, EARLY_HINTS), False, id="100-103-103-one-write"),
]


@pytest.fixture()
def quirk() -> Iterator[QuirkServer]:
    with serve_gevent() as srv:
        yield srv


def _read(srv: QuirkServer, n: int = 1, path: str = "/v1/chat/completions") -> list[stream.StreamResult]:
    """`n` streamed requests in turn over one client (one pooled connection while the server keeps it)."""
    client = HTTPClient("127.0.0.1", srv.port, network_timeout=5, concurrency=1)
    body = json.dumps({"model": MODEL, "stream": True}).encode()
    try:
        return [
            stream.send_and_read(
                client,
                path,
                body,
                {"Content-Type": "application/json"},
                api="completions" if path == "/v1/completions" else "chat",
            )
            for _ in range(n)
        ]
    finally:
        client.close()


def _assert_complete(res: stream.StreamResult) -> None:
    assert res.error is None, (res.error, res.error_detail)
    assert res.status == 200 and len(res.chunk_times) == N_OUT and res.finish_reason == "length"
    assert res.usage == {"prompt_tokens": 3, "completion_tokens": N_OUT}


# ----------------------------------------------------------------------------------------- missing [DONE]
@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_clean_end_with_finish_reason_but_no_done_is_a_success(quirk, monkeypatch, use_reactor, path) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(done=False)
    for res in _read(quirk, 3, path):
        _assert_complete(res)
        assert not res.done  # what the record flags as a missing [DONE]
    assert not reactor().streams


@pytest.mark.parametrize("use_reactor", READERS)
def test_clean_end_without_finish_reason_or_done_stays_truncated(quirk, monkeypatch, use_reactor) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(done=False, finish=False)
    (res,) = _read(quirk)
    assert res.error == "truncated" and res.error_detail == "stream ended without [DONE]"
    assert len(res.chunk_times) == N_OUT  # what came is still timed


@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize("done", [False, True], ids=["no-done", "done"])
def test_close_in_the_middle_of_a_chunk_stays_truncated(quirk, monkeypatch, use_reactor, done) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(done=done, end="cut")  # finish_reason and usage came, the framing did not end
    (res,) = _read(quirk)
    assert res.error == "truncated", (res.error, res.error_detail)


# ----------------------------------------------------------------------------------------- interim 1xx
@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize(("interim", "apart"), INTERIMS)
def test_interim_responses_before_the_stream_are_skipped(
    quirk, monkeypatch, use_reactor, interim, apart
) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(interim=interim, interim_apart=apart)
    for res in _read(quirk, 3):
        _assert_complete(res)
        assert res.done
    assert not reactor().streams


def test_switching_protocols_is_not_skipped(quirk) -> None:
    quirk.quirks = Quirks(
        interim=(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",)
    )
    with gevent.Timeout(10):
        (res,) = _read(quirk)
    assert res.error is not None and res.status != 200


@pytest.mark.parametrize(("interim", "apart"), INTERIMS)
def test_interim_responses_before_a_plain_answer_on_the_pooled_client(quirk, interim, apart) -> None:
    # the calibration and model lookup of a user go through geventhttpclient's own request(), concurrently
    quirk.quirks = Quirks(interim=interim, interim_apart=apart)
    client = HTTPClient("127.0.0.1", quirk.port, network_timeout=5, concurrency=4)
    body = json.dumps({"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "a"}]})

    def one(_i: int) -> tuple[int, bytes]:
        resp = client.request(
            "POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"}
        )
        return resp.status_code, resp.read()

    try:
        got = [g.get() for g in [gevent.spawn(one, i) for i in range(16)]]
    finally:
        client.close()
    for status, raw in got:
        assert status == 200 and json.loads(raw)["usage"]["prompt_tokens"] == 3


# ----------------------------------------------------------------------------------------- the other clients
@pytest.mark.parametrize(("interim", "apart"), INTERIMS)
def test_preflight_skips_interim_responses(interim, apart) -> None:
    with serve_threaded(Quirks(interim=interim, interim_apart=apart)) as srv:
        for endpoint in ("chat", "completions"):
            info = check_server(f"http://127.0.0.1:{srv.port}", None, None, endpoint)
            assert info.model == MODEL and info.attempts == [200]


def test_preflight_reads_a_stream_without_done() -> None:
    with serve_threaded(Quirks(done=False)) as srv:
        assert check_server(f"http://127.0.0.1:{srv.port}", MODEL, None).attempts == [200]


@pytest.mark.parametrize(("interim", "apart"), INTERIMS)
def test_metrics_scrape_and_profiler_skip_interim_responses(tmp_path, interim, apart) -> None:
    with serve_threaded(Quirks(interim=interim, interim_apart=apart)) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        row = ServerMetricsSampler(base + "/metrics", str(tmp_path / "m.jsonl")).scrape_once()
        assert row.get("v", {}).get("vllm:num_requests_running") == 1.0, row
        assert profile_post(base + "/start_profile", None, 5.0) == (200, "")


def test_preflight_names_switching_protocols() -> None:
    with serve_threaded(
        Quirks(interim=(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",))
    ) as srv:
        with pytest.raises(PreflightError, match="HTTP 101"):
            check_server(f"http://127.0.0.1:{srv.port}", None, None)


# ----------------------------------------------------------------------------------------- in the result
def test_missing_done_is_counted_over_successes_in_the_result() -> None:
    recs = [rec(0.0, [10, 20], out=2), rec(0.1, [10, 20], out=2), rec(0.2, [10], out=1, error="truncated")]
    recs[1].extra = {"no_done": True}
    recs[2].extra = {"no_done": True}  # a failure: not counted
    assert "missing_done_requests" not in compute_metrics(recs[:1])  # absent unless some stream lacked it
    assert compute_metrics(recs)["missing_done_requests"] == 1
    n, before, tables = _unpack(memoryview(pack_records(recs[1:2])))
    del before["no_done"]  # a records.cols frame written before the column: no flags in it
    merged = _merge([_unpack(memoryview(pack_records(recs[1:2]))), (n, before, tables)])
    assert merged.a["no_done"].tolist() == [True, False]


def test_the_adapters_interim_fix_reaches_geventhttpclients_own_requests() -> None:
    # what ghc_adapter assumes: HTTPClient.request builds its responses from the module global it replaces
    import geventhttpclient.client as ghc_client

    assert "HTTPSocketPoolResponse(" in inspect.getsource(ghc_client.HTTPClient.request)
    assert ghc_client.HTTPSocketPoolResponse is ghc_adapter.ResponseWithHeaderHook
    assert issubclass(StampedResponse, ghc_adapter.ResponseWithHeaderHook)
