"""calibrate's probe talks as every other request of a run: interim 1xx answers (a proxy's 103 Early Hints) skipped,
the URL's userinfo sent as Basic auth below the API key and --header, the URL's path kept as the prefix of every
request. The server is a few lines of raw socket code, so the 103 goes on the wire exactly as a proxy sends it."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orchestration.twin.probe import Budget, Probe, scrape

pytestmark = pytest.mark.timeout(30)

EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
METRICS = b'vllm:num_requests_running{engine="0"} 3.0\nvllm:num_requests_waiting{engine="0"} 1.0\n'
TOKENS = 4


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(doc: dict[str, object]) -> bytes:
    return _chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")


def _answer(conn: socket.socket, seen: list[tuple[str, dict[str, str]]], texts: list[str]) -> None:
    """One request on `conn`: a 103 first, then the answer (a /metrics page, or a streamed completion of one
    chunk per text, the last one with the finish reason)."""
    f = conn.makefile("rb")
    line = f.readline().decode()
    if not line:
        return
    method, target = line.split()[:2]
    headers: dict[str, str] = {}
    while (h := f.readline()) not in (b"\r\n", b""):
        name, _, value = h.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    f.read(int(headers.get("content-length", "0")))
    seen.append((f"{method} {target}", headers))
    conn.sendall(EARLY_HINTS)  # its own write: the client reads it before the final answer exists
    if target.endswith("/metrics"):
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
            % (len(METRICS), METRICS)
        )
        return
    body = b"".join(
        _event(
            {"choices": [{"index": 0, "text": t, "finish_reason": "length" if i == len(texts) - 1 else None}]}
        )
        for i, t in enumerate(texts)
    )
    body += _event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": len(texts)}})
    body += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    )


@contextmanager
def _server(texts: list[str] | None = None) -> Iterator[tuple[int, list[tuple[str, dict[str, str]]]]]:
    """A server on a free port answering each connection's one request (a completion of `texts`, one chunk each;
    default TOKENS words); yields (port, the requests seen)."""
    texts = [f" t{i}" for i in range(TOKENS)] if texts is None else texts
    seen: list[tuple[str, dict[str, str]]] = []
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5.0)
                _answer(conn, seen, texts)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield sock.getsockname()[1], seen
    finally:
        stop.set()
        t.join(5.0)
        sock.close()


def test_the_probe_reads_past_early_hints() -> None:
    with _server() as (port, seen):
        probe = Probe(f"http://127.0.0.1:{port}", "m", Budget(20.0))
        status, body = probe.get("/metrics")
        assert (status, body) == (200, METRICS)  # not the 103's empty body
        snap = scrape(probe)
        assert snap is not None and snap["running"] == 3.0 and snap["waiting"] == 1.0
        shot = probe.shot("a prompt", TOKENS)
        assert shot.error is None, shot.error
        assert shot.output_tokens == TOKENS and shot.prompt_tokens == 7 and shot.tokens_seen == TOKENS
        assert shot.ttft_s is not None and shot.tpot_s is not None
    assert [r for r, _ in seen] == ["GET /metrics", "GET /metrics", "POST /v1/completions"]


def test_the_probe_sends_the_runs_headers_to_the_urls_path() -> None:
    with _server() as (port, seen):
        probe = Probe(
            f"http://user:pw@127.0.0.1:{port}/gw/", "m", Budget(20.0), extra_headers={"X-Team": "a"}
        )
        assert probe.host == f"http://127.0.0.1:{port}/gw/"  # the userinfo is a header, never part of the URL
        assert probe.get("/metrics")[0] == 200
        keyed = Probe(f"http://user:pw@127.0.0.1:{port}", "m", Budget(20.0), api_key="k1")
        assert keyed.shot("a prompt", TOKENS).error is None
    (first, h1), (second, h2) = seen
    assert first == "GET /gw/metrics" and second == "POST /v1/completions"
    assert h1["authorization"] == "Basic " + base64.b64encode(b"user:pw").decode() and h1["x-team"] == "a"
    assert h2["authorization"] == "Bearer k1"  # the API key wins over the URL's userinfo, as for the load


def test_a_token_without_text_still_has_its_time() -> None:
    """A token that decodes to no text yet (a byte of an unfinished UTF-8 character, which a random model's greedy
    first token can be) comes in the chunk that ends the stream: a 1-token request has its TTFT from that chunk,
    and a stream whose last token has no text ends its TPOT there. On vLLM 0.26 such requests read as "no token
    came back", and calibrate dropped every burst of 1-token requests."""
    with _server([""]) as (port, _):
        shot = Probe(f"http://127.0.0.1:{port}", "m", Budget(20.0)).shot("a prompt", 1)
        assert shot.error is None and shot.output_tokens == 1, shot
        assert shot.ttft_s is not None and shot.e2e_s == shot.ttft_s and shot.tpot_s is None
    with _server([" a", " b", ""]) as (port, _):
        shot = Probe(f"http://127.0.0.1:{port}", "m", Budget(20.0)).shot("a prompt", 3)
        assert shot.error is None and shot.output_tokens == 3 and shot.tokens_seen == 2, shot
        assert shot.e2e_s is not None and shot.ttft_s is not None and shot.e2e_s >= shot.ttft_s
