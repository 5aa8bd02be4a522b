"""A request's deadlines through both stream readers: `--stall-timeout` (no output chunk for S s: a gateway's
`: ping` keep-alives do not count) and `--request-timeout` (the whole request), each its own failure kind, with
the tokens read before it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from geventhttpclient import HTTPClient

from tests.unit.client.quirk_server import MODEL, Quirks, QuirkServer, serve_gevent
from vllm_users.client import stream
from vllm_users.client.deadlines import Limits
from vllm_users.client.reactor import HAVE_EPOLL, reactor

pytestmark = pytest.mark.timeout(60)

READERS = [
    pytest.param(True, id="reactor", marks=pytest.mark.skipif(not HAVE_EPOLL, reason="no epoll")),
    pytest.param(False, id="greenlet"),
]
BOUND_S = 15.0  # the server pings for 30 s: a request that ends before this was ended by its deadline


@pytest.fixture()
def quirk() -> Iterator[QuirkServer]:
    with serve_gevent() as srv:
        yield srv


def _read(srv: QuirkServer, limits: Limits, *, stream_: bool = True) -> stream.StreamResult:
    client = HTTPClient("127.0.0.1", srv.port, network_timeout=20, concurrency=1)
    body = json.dumps({"model": MODEL, "stream": stream_}).encode()
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    try:
        return stream.send_and_read(
            client, "/v1/chat/completions", body, headers, stream=stream_, limits=limits
        )
    finally:
        client.close()


@pytest.mark.parametrize("use_reactor", READERS)
@pytest.mark.parametrize(
    "ping",
    [
        pytest.param(": ping\n\n", id="comment"),
        pytest.param("\n", id="blank"),
        pytest.param("data:\n\n", id="empty-data"),
    ],
)
def test_pings_after_three_tokens_end_as_a_stall_with_the_three(
    quirk, monkeypatch, use_reactor, ping
) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(ping_after=3, ping_form=ping, gap_s=0.05)
    res = _read(quirk, Limits(request_s=0, stall_s=0.5))
    assert res.error == "stall_timeout", (res.error, res.error_detail)
    assert res.error_detail == "no output for --stall-timeout 0.5 s after 3 chunks"
    assert len(res.chunk_times) == 3
    # ended by the stall, not by the pings' end: at least 0.5 s after the third chunk, long before 30 s
    assert 0.5 <= res.t_end - res.chunk_times[-1] and res.t_end - res.t0 < BOUND_S
    assert not reactor().streams


@pytest.mark.parametrize("use_reactor", READERS)
def test_a_stream_that_trickles_ends_at_the_request_deadline(quirk, monkeypatch, use_reactor) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(n_out=400, gap_s=0.05)  # 20 s of tokens, each within any stall bound
    res = _read(quirk, Limits(request_s=1.0, stall_s=0.5))
    assert res.error == "request_timeout", (res.error, res.error_detail)
    assert res.error_detail == "request ran past --request-timeout 1 s"
    assert 0 < len(res.chunk_times) < 400  # the tokens so far are kept
    assert 1.0 <= res.t_end - res.t0 < BOUND_S


@pytest.mark.parametrize("use_reactor", READERS)
def test_a_late_head_is_a_stall_before_the_first_token(quirk, monkeypatch, use_reactor) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(headers_after_s=5.0)
    res = _read(quirk, Limits(request_s=3.0, stall_s=0.5))
    assert (res.error, res.error_detail) == (
        "stall_timeout",
        "no output for --stall-timeout 0.5 s after 0 chunks",
    )
    assert res.chunk_times == [] and 0.5 <= res.t_end - res.t0 < 3.0


def test_a_non_streamed_answer_is_bounded_by_the_request_deadline_only(quirk) -> None:
    quirk.quirks = Quirks(headers_after_s=1.0)
    assert _read(quirk, Limits(request_s=0, stall_s=0.3), stream_=False).error is None  # no stream: no stall
    quirk.quirks = Quirks(headers_after_s=5.0)
    res = _read(quirk, Limits(request_s=0.5, stall_s=0.3), stream_=False)
    assert res.error == "request_timeout" and res.t_end - res.t0 < 5.0


@pytest.mark.parametrize("use_reactor", READERS)
def test_a_whole_stream_within_its_deadlines_is_untouched(quirk, monkeypatch, use_reactor) -> None:
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    quirk.quirks = Quirks(n_out=8, gap_s=0.02)
    res = _read(quirk, Limits(request_s=30, stall_s=10))
    assert res.error is None and len(res.chunk_times) == 8 and res.done


def test_limits_pick_the_deadline_that_strikes_first() -> None:
    assert Limits(0, 0).first(True) == 0 and not Limits(0, 0).any
    assert Limits(5, 2).first(True) == 2 and Limits(5, 2).first(False) == 5
    assert Limits(1, 2).header_error(True).kind == "request_timeout"
    assert Limits(0, 2).header_error(True).kind == "stall_timeout"
    assert Limits(3, 2).header_error(False).kind == "request_timeout"
    lim = Limits(10, 1)
    assert lim.check(5.0, 10.0, 4.5, 1) is None
    assert lim.check(5.0, 10.0, 3.9, 1).kind == "stall_timeout"  # type: ignore[union-attr]
    assert lim.check(10.1, 10.0, 10.0, 1).kind == "request_timeout"  # type: ignore[union-attr]
    assert Limits(10, 0).check(9.0, 10.0, 0.0, 0) is None  # no stall bound: silence is the read timeout's
