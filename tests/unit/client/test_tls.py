"""TLS (vllm_users/client/tls.py): the one client context (verification by default, --ca-bundle, SSL_CERT_FILE,
--insecure, mTLS), the one-line verification error, and the stamped read over TLS: streams read by the reactor
and by the greenlet reader through a TLS server, with the kernel's receive stamps."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from time import perf_counter, sleep, time
from typing import Any

import gevent
import gevent.ssl
import pytest
from gevent.server import StreamServer
from geventhttpclient import HTTPClient

from tests.unit.client.tls_certs import Certs, make_certs
from vllm_users.client import stdlib_http, stream, tls, wire
from vllm_users.client.reactor import HAVE_EPOLL, reactor
from vllm_users.errors import UsageError

GAP_S = 0.004


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _server_context(certs: Certs, client_ca: Path | None = None) -> ssl.SSLContext:
    ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    if client_ca is not None:  # mTLS: the client must present a certificate signed by this CA
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(str(client_ca))
    return ctx


def _event(i: int) -> bytes:
    doc = {"choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}
    data = b"data: " + json.dumps(doc).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _handle(sock: Any, _addr: Any) -> None:
    f = sock.makefile("rb")
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = f.readline()
        if not line:
            return
        head += line
    length = int(
        next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
    )
    n = json.loads(f.read(length))["n"]
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    for i in range(n):
        sock.sendall(_event(i))  # one TLS record each
        gevent.sleep(GAP_S)
    done = b"data: [DONE]\n\n"
    sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))


@pytest.fixture(scope="module")
def server(certs: Certs) -> Iterator[StreamServer]:
    srv = StreamServer(("127.0.0.1", 0), _handle, ssl_context=_server_context(certs))
    srv.start()
    yield srv
    srv.stop()


def _client(port: int, cfg: tls.TLSConfig, timeout: float = 10.0) -> HTTPClient:
    return HTTPClient(
        "127.0.0.1",
        port,
        ssl=True,
        insecure=cfg.insecure,
        network_timeout=timeout,
        concurrency=1,
        ssl_context_factory=tls.user_context_factory(cfg),
    )


# ----- the context -----


def test_default_context_verifies_certificates_and_host_names(monkeypatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    ctx = tls.context(tls.TLSConfig())
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    off = tls.context(tls.TLSConfig(insecure=True))
    assert off.verify_mode == ssl.CERT_NONE and not off.check_hostname


def test_ca_bundle_then_ssl_cert_file_name_the_cas(certs: Certs, monkeypatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.wrong_ca))
    assert tls.TLSConfig().cafile() == str(certs.wrong_ca)
    assert tls.TLSConfig(ca_bundle=str(certs.ca)).cafile() == str(
        certs.ca
    )  # the option wins, as curl's --cacert
    # the context trusts exactly that file's CA
    names = [c["subject"] for c in tls.context(tls.TLSConfig(ca_bundle=str(certs.ca))).get_ca_certs()]
    assert names == [((("commonName", "vllm-locust test CA"),),)]


def test_bad_files_are_one_line_usage_errors(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(
        UsageError, match=r"^--ca-bundle .*missing\.pem: cannot load CA certificates: No such file"
    ):
        tls.configure(tls.TLSConfig(ca_bundle=str(tmp_path / "missing.pem")))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(UsageError, match=r"^--ca-bundle .*junk\.pem: cannot load CA certificates"):
        tls.configure(tls.TLSConfig(ca_bundle=str(junk)))
    with pytest.raises(UsageError, match=r"^--client-cert .*ca\.pem: cannot load the certificate and key"):
        tls.configure(tls.TLSConfig(client_cert=str(certs.ca)))  # a certificate without its key
    with pytest.raises(UsageError, match="--client-key needs --client-cert"):
        tls.configure(tls.TLSConfig(client_key=str(certs.client_key)))
    assert tls.current() == tls.TLSConfig()  # nothing half-set


# ----- handshakes through stdlib_http (the preflight's, /metrics', calibration's connections) -----


def _get(port: int, cfg: tls.TLSConfig) -> int:
    tls.configure(cfg)
    try:
        conn = stdlib_http.HTTPSConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", "/")
            return conn.getresponse().status
        finally:
            conn.close()
    finally:
        tls.configure(tls.TLSConfig())


@pytest.fixture()
def plain_tls_server(certs: Certs) -> Iterator[tuple[int, ssl.SSLContext]]:
    """A threaded HTTPS server answering 204 (its context can be made to ask for a client certificate)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    lsock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except OSError:
                continue
            try:
                with ctx.wrap_socket(conn, server_side=True) as s:
                    s.settimeout(5)
                    s.recv(65536)
                    s.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            except (OSError, ssl.SSLError):
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield lsock.getsockname()[1], ctx
    stop.set()
    t.join(5)
    lsock.close()


def test_right_ca_passes_wrong_ca_fails_with_one_line_naming_the_host(certs: Certs, plain_tls_server) -> None:
    port, _ = plain_tls_server
    assert _get(port, tls.TLSConfig(ca_bundle=str(certs.ca))) == 204
    with pytest.raises(ssl.SSLCertVerificationError) as e:
        _get(port, tls.TLSConfig(ca_bundle=str(certs.wrong_ca)))
    line = tls.describe_error(e.value, f"https://127.0.0.1:{port}")
    assert line is not None and "\n" not in line
    assert line.startswith(f"TLS: the certificate of 127.0.0.1:{port} failed verification: ")
    assert "unable to get local issuer certificate" in line
    assert _get(port, tls.TLSConfig(ca_bundle=str(certs.wrong_ca), insecure=True)) == 204


def test_client_certificate_for_mtls(certs: Certs, plain_tls_server) -> None:
    port, ctx = plain_tls_server
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(str(certs.ca))
    cfg = tls.TLSConfig(
        ca_bundle=str(certs.ca), client_cert=str(certs.client_cert), client_key=str(certs.client_key)
    )
    assert _get(port, cfg) == 204
    with pytest.raises((ssl.SSLError, ConnectionError)):  # no certificate: the server ends the handshake
        _get(port, tls.TLSConfig(ca_bundle=str(certs.ca)))


# ----- the stamped read over TLS -----


def _read(port: int, n: int, cfg: tls.TLSConfig) -> stream.StreamResult:
    client = _client(port, cfg)
    try:
        body = json.dumps({"n": n}).encode()
        return stream.send_and_read(
            client, "/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
    finally:
        client.close()


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("use_reactor", [True, False])
def test_streams_over_tls_read_whole_with_paced_chunk_times(
    certs: Certs, server, monkeypatch, use_reactor: bool, kernel: bool
) -> None:
    if use_reactor and not HAVE_EPOLL:
        pytest.skip("the reactor needs epoll (Linux)")
    if kernel and not wire.KERNEL_TIMESTAMPS:
        pytest.skip("no SO_TIMESTAMPNS on this platform")
    monkeypatch.setattr(stream, "USE_REACTOR", use_reactor)
    monkeypatch.setattr(wire, "KERNEL_TIMESTAMPS", kernel)
    cfg = tls.TLSConfig(ca_bundle=str(certs.ca))
    jobs = [gevent.spawn(_read, server.server_port, 30, cfg) for _ in range(8)]
    gevent.joinall(jobs, timeout=30, raise_error=True)
    for job in jobs:
        res = job.value
        assert res.error is None, res.error_detail
        assert res.done and len(res.chunk_times) == 30
        gaps = [b - a for a, b in zip(res.chunk_times, res.chunk_times[1:], strict=False)]
        assert min(gaps) >= 0
        assert (
            sum(gaps) >= 29 * GAP_S * 0.5
        )  # the server's pacing, not one burst at the end (a busy hub reads late)
    assert not reactor().streams


def test_a_stream_over_tls_fails_verification_against_the_wrong_ca(certs: Certs, server) -> None:
    res = _read(server.server_port, 3, tls.TLSConfig(ca_bundle=str(certs.wrong_ca)))
    assert res.error == "connection" and "CERTIFICATE_VERIFY_FAILED" in (res.error_detail or "")
    assert (
        _read(server.server_port, 3, tls.TLSConfig(ca_bundle=str(certs.wrong_ca), insecure=True)).error
        is None
    )


def _whole_records(raw: socket.socket) -> int:
    try:
        buf = raw.recv(65536, socket.MSG_PEEK)
    except BlockingIOError:
        return 0
    count, off = 0, 0
    while off + 5 <= len(buf):
        off += 5 + int.from_bytes(buf[off + 3 : off + 5], "big")
        count += off <= len(buf)
    return count


@pytest.mark.skipif(not wire.KERNEL_TIMESTAMPS, reason="no SO_TIMESTAMPNS on this platform")
@pytest.mark.parametrize("path", ["greenlet", "reactor"])
def test_a_record_read_late_carries_its_kernel_receive_stamp(certs: Certs, path: str) -> None:
    """The server (a native thread) sends two records; this hub reads them only after it knows both were sent:
    their stamps are from before that moment (the kernel's), not from the late read, and in order."""
    sent = threading.Event()
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    sctx.num_tickets = 0  # the queue then holds our two records only
    lsock = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = lsock.accept()
        with sctx.wrap_socket(conn, server_side=True) as s:
            s.recv(16)  # the client's go: its SO_TIMESTAMPNS is on
            s.sendall(b"first record")
            s.sendall(b"second record")
            sent.set()
            s.recv(16)  # until the client closes

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ctx = tls.context(tls.TLSConfig(ca_bundle=str(certs.ca)), gevent.ssl.SSLContext)
    sock = ctx.wrap_socket(gevent.socket.create_connection(lsock.getsockname()), server_hostname="127.0.0.1")
    try:
        sock.setsockopt(socket.SOL_SOCKET, wire._SO_TIMESTAMPNS, 1)
        sock.sendall(b"go")
        assert sent.wait(10)
        raw = sock._sock
        for _ in range(5000):  # until both records are in the socket's queue (peeked: nothing is read)
            if _whole_records(raw) == 2:
                break
            sleep(0.001)  # blocks this hub: nothing reads them early
        seen = perf_counter()
        wmp = time() - perf_counter()
        got = []
        if path == "greenlet":
            for _ in range(2):
                got.append(wire.read_stamped(sock, 65536, True, wmp))
        else:
            parts = tls.ssl_parts(sock)
            assert parts is not None
            for _ in range(2):
                got.append(tls.read_record(parts[0], parts[1], 65536, True, wmp, 0.0))
        assert [d for d, _ in got] == [b"first record", b"second record"]  # one record per read
        assert got[0][1] <= got[1][1] <= seen  # stamped when they arrived, before this hub looked
    finally:
        sock.close()
        t.join(5)
        lsock.close()
