"""What proxies and gateways send, through both stream readers and the preflight: JSON re-serialized with spaces
(Python's json.dumps), events split over several `data:` lines, usage on the last output event, the media type in
another case or with parameters (RFC 9110 §8.3.1), a body compressed against `Accept-Encoding: identity`, and the
server's own words of an error (OpenAI's `event: error`, `data: {"error": ...}`, a 200 error JSON)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from geventhttpclient import HTTPClient

from orchestration.server.preflight import PreflightError, check_server
from tests.unit.client.quirk_server import (
    ERROR_MESSAGE,
    MODEL,
    N_OUT,
    Quirks,
    QuirkServer,
    serve_gevent,
    serve_threaded,
)
from vllm_users.client import sse_events, stream
from vllm_users.client import sse_forms as F
from vllm_users.client.reactor import HAVE_EPOLL, reactor

pytestmark = pytest.mark.timeout(60)

READERS = [
    pytest.param(True, id="reactor", marks=pytest.mark.skipif(not HAVE_EPOLL, reason="no epoll")),
    pytest.param(False, id="greenlet"),
]
ENDPOINTS = [
    pytest.param("/v1/chat/completions", id="chat"),
    pytest.param("/v1/completions", id="completions"),
]
FORMS = [
    pytest.param(Quirks(spaced=True), id="spaced"),
    pytest.param(Quirks(spaced=True, done=False), id="spaced-no-done"),
    pytest.param(Quirks(spaced=True, usage_on_last=True), id="spaced-usage-on-last"),
    pytest.param(Quirks(usage_on_last=True), id="compact-usage-on-last"),
    pytest.param(Quirks(multiline=True), id="multiline"),
    pytest.param(Quirks(spaced=True, multiline=True, done=False), id="spaced-multiline-no-done"),
    pytest.param(Quirks(content_type="Text/Event-Stream; charset=UTF-8"), id="content-type-case"),
    pytest.param(Quirks(content_type="TEXT/EVENT-STREAM"), id="content-type-upper"),
    pytest.param(Quirks(encoding="gzip"), id="gzip"),
    pytest.param(Quirks(encoding="gzip", spaced=True, done=False), id="gzip-spaced-no-done"),
    pytest.param(Quirks(encoding="deflate"), id="deflate"),
    pytest.param(Quirks(encoding="deflate-raw"), id="deflate-raw"),
    pytest.param(
        Quirks(encoding="br"), id="br", marks=pytest.mark.skipif(not F.HAVE_BROTLI, reason="no brotli")
    ),
]


@pytest.fixture()
def quirk() -> Iterator[QuirkServer]:
    with serve_gevent() as srv:
        yield srv


def _read(srv: QuirkServer, n: int = 1, path: str = "/v1/chat/completions") -> list[stream.StreamResult]:
    client = HTTPClient("127.0.0.1", srv.port, network_timeout=5, concurrency=1)
    body = json.dumps({"model": MODEL, "stream": True}).encode()
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    api = "completions" if path == "/v1/completions" else "chat"
    try:
        return [stream.send_and_read(client, path, body, headers, api=api) for _ in range(n)]
    finally:
        client.close()


# ----------------------------------------------------------------------------------------- streams read alike
@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("quirks", FORMS)
def test_a_proxys_forms_read_like_vllms(quirk, monkeypatch, use_reactor, path, quirks) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = quirks
    for res in _read(quirk, 2, path):  # two: the connection goes back to the pool after a decoded body
        assert res.error is None, (res.error, res.error_detail)
        assert res.finish_reason == "length"
        assert res.usage == {"prompt_tokens": 3, "completion_tokens": N_OUT}
        assert len(res.chunk_times) == N_OUT
        assert res.done is quirks.done
        assert res.encoding == (quirks.encoding.split("-")[0] or None)
        gaps = [b - a for a, b in zip(res.chunk_times, res.chunk_times[1:], strict=False)]
        assert min(gaps) > 0.002  # each event timed by its own read (server gap 10 ms), compressed or not
    assert not reactor().streams


@pytest.mark.parametrize("use_reactor", READERS)
def test_a_stream_whose_encoding_cannot_be_decoded_is_a_bad_response(quirk, monkeypatch, use_reactor) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(encoding="gzip")
    monkeypatch.setattr(
        F, "decoder", lambda enc: F._Deflate()
    )  # gzip bytes read as deflate: they do not decode
    (res,) = _read(quirk)
    assert res.error == "bad_response" and "does not decode" in (res.error_detail or "")
    assert (res.error_detail or "").endswith("(server sent Content-Encoding: gzip, not asked for)")


# ----------------------------------------------------------------------------------------- errors in their words
@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(
    "quirks",
    [
        pytest.param(Quirks(error="event"), id="event-error"),
        pytest.param(Quirks(error="event", spaced=True), id="event-error-spaced"),
        pytest.param(Quirks(error="data"), id="data-error"),
        pytest.param(Quirks(error="data", spaced=True, encoding="gzip"), id="data-error-spaced-gzip"),
        pytest.param(Quirks(error="json200"), id="200-json"),
    ],
)
def test_the_servers_error_message_reaches_the_record(quirk, monkeypatch, use_reactor, path, quirks) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = quirks
    (res,) = _read(quirk, 1, path)
    assert res.error == "inband_error" and res.error_detail == ERROR_MESSAGE, (res.error, res.error_detail)


def test_a_200_that_is_neither_a_stream_nor_an_error_stays_a_bad_response() -> None:
    assert F.not_a_stream(b"<html>oops</html>", "text/html", "") == (
        "bad_response",
        "expected text/event-stream, got text/html",
    )
    assert F.not_a_stream(b'{"choices": []}', "application/json", "")[0] == "bad_response"


# ----------------------------------------------------------------------------------------- the preflight
@pytest.mark.parametrize("quirks", FORMS)
def test_preflight_accepts_a_proxys_forms(quirks) -> None:
    with serve_threaded(quirks) as srv:
        assert check_server(f"http://127.0.0.1:{srv.port}", MODEL, None).attempts == [200]


@pytest.mark.parametrize("quirks", [Quirks(error="json200"), Quirks(error="event"), Quirks(error="data")])
def test_preflight_names_the_servers_error(quirks) -> None:
    with serve_threaded(quirks) as srv, pytest.raises(PreflightError, match=ERROR_MESSAGE):
        check_server(f"http://127.0.0.1:{srv.port}", MODEL, None)


def test_preflight_still_refuses_what_is_not_an_event_stream() -> None:
    with (
        serve_threaded(Quirks(content_type="text/plain")) as srv,
        pytest.raises(PreflightError, match="text/plain"),
    ):
        check_server(f"http://127.0.0.1:{srv.port}", MODEL, None)


# ----------------------------------------------------------------------------------------- the pieces
def test_compact_events_are_told_apart_from_spaced_ones() -> None:
    assert F.is_compact(b'{"id":"x","choices":[]}')
    assert F.is_compact(b'{"choices":[{"delta":{"content":"a b: c"}}]}')
    for spaced in (
        b'{"id": "x"}',
        b'{ "id":"x"}',
        b'{"id" :"x"}',
        b'{"id":\t"x"}',
        b'{\n"id":"x"}',
        b"{}",
        b'{"a',
    ):
        assert not F.is_compact(spaced), spaced


def test_compact_rewrites_any_spacing_and_keeps_key_order() -> None:
    doc = {
        "usage": {"completion_tokens": 2},
        "choices": [{"finish_reason": "stop", "delta": {"content": "é"}}],
    }
    want = json.dumps(doc, separators=(",", ":")).encode()
    assert F.compact(json.dumps(doc).encode()) == want
    assert F.compact(json.dumps(doc, indent=2).encode()) == want
    assert F.compact(b" [DONE] ") == b"[DONE]"


def test_media_types_compare_without_case_or_parameters() -> None:
    assert F.is_event_stream("Text/Event-Stream; charset=utf-8") and F.is_event_stream(" text/event-stream ")
    assert not F.is_event_stream("application/json") and not F.is_event_stream("")
    assert not F.is_event_stream("text/event-streams")


def test_error_messages_in_every_shape_are_one_clean_line_without_credentials() -> None:
    for doc in (
        {"error": {"message": "m"}},
        {"error": "m"},
        {"type": "error", "message": "m"},
        {"type": "error", "error": {"type": "x", "message": "m"}},
        {"response": {"error": {"message": "m"}}},
        {"detail": "m"},
        {"object": "error", "message": "m"},
    ):
        assert F.error_message(doc) == "m", doc
    assert F.error_message({"choices": []}) is None and F.error_message([1]) is None
    long = F.clean_message("x\n" * 500)
    assert len(long) == F.MAX_MESSAGE and "\n" not in long
    leaked = F.clean_message(
        "Invalid key: Authorization: Bearer abc.def-123 and sk-proj-ABCDEFGH1234 api_key=zzz9"
    )
    assert "abc.def" not in leaked and "ABCDEFGH1234" not in leaked and "zzz9" not in leaked, leaked
    assert F.body_error(b'{"error": {"message": "Bearer s3cret is invalid"}}') == "Bearer *** is invalid"


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip", "deflate", "GZIP"])
def test_decode_all_and_what_cannot_be_decoded(encoding) -> None:
    import zlib

    wbits = zlib.MAX_WBITS if encoding == "deflate" else 16 + zlib.MAX_WBITS
    z = zlib.compressobj(6, zlib.DEFLATED, wbits)
    assert F.decode_all(z.compress(b"hello") + z.flush(), encoding) == b"hello"
    assert F.decoder("identity") is None and F.decoder("") is None
    with pytest.raises(F.DecodeError, match="compress"):
        F.decoder("compress")
    with pytest.raises(F.DecodeError):
        F.decode_all(b"not gzip", "gzip")


def test_a_gateways_own_spaced_events_in_a_compact_stream_are_read() -> None:
    # vLLM's compact events passed through, then the gateway's own finish and usage events, written by json.dumps
    compact = [
        {"id": "x", "choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}
        for i in range(3)
    ]
    spaced = [
        {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}},
    ]
    body = b"".join(b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in compact)
    body += b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in spaced)
    res = stream.StreamResult(t0=0.0)
    ev = sse_events.SseEvents(res, "chat", False)
    ev.feed(body, 1.0)
    ev.finish(1.0)
    assert len(res.chunk_times) == 3 and res.finish_reason == "stop"
    assert res.usage == {"prompt_tokens": 3, "completion_tokens": 3}


# ----------------------------------------------------------------------------------------- codings not asked for
@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize("at_once", [False, True], ids=["flushed", "at-once"])
def test_a_gzip_transfer_coding_is_named_not_a_missing_done(quirk, monkeypatch, use_reactor, at_once) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(transfer_coding="gzip", at_once=at_once)
    for res in _read(quirk, 2):  # two: the coded connection is closed, the next request opens another
        assert (res.error, res.error_detail) == (
            "bad_response",
            "server sent Transfer-Encoding: gzip, not asked for",
        )
    assert not reactor().streams


def test_transfer_codings_other_than_chunked_are_named() -> None:
    assert F.unasked_transfer_coding(None) is None and F.unasked_transfer_coding("chunked") is None
    assert F.unasked_transfer_coding("Chunked, identity") is None
    assert F.unasked_transfer_coding("gzip, chunked") == "server sent Transfer-Encoding: gzip, not asked for"
    assert (
        F.unasked_transfer_coding(["deflate", "chunked"])
        == "server sent Transfer-Encoding: deflate, not asked for"
    )


@pytest.mark.parametrize("use_reactor", READERS)
def test_a_compressed_stream_cut_short_names_the_coding(quirk, monkeypatch, use_reactor) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(encoding="gzip", done=False, finish=False)
    (res,) = _read(quirk)
    assert res.error == "truncated"
    assert (
        res.error_detail == "stream ended without [DONE] (server sent Content-Encoding: gzip, not asked for)"
    )
