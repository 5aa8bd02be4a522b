"""--replica-header: the replica a response names is read once from its headers, on a stream and on an error."""

from __future__ import annotations

from geventhttpclient.client import HTTPClient

from tests.unit.client.local_server import server_fixture
from vllm_users.client.stream import send_and_read

EVENTS = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":"length"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


def _handle(sock, _addr) -> None:
    f = sock.makefile("rb")
    while True:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = f.readline()
            if not line:
                return
            head += line
        length = next(
            (int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")), 0
        )
        f.read(length)
        if b"/fail" in head.split(b"\r\n")[0]:
            body = b'{"error":{"message":"overloaded"}}'
            sock.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nX-Served-By: pod-9\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            continue
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Served-By: pod-2\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(EVENTS), EVENTS)
        )


server = server_fixture(_handle)


def test_the_replica_header_is_kept_on_success_and_on_error(server) -> None:
    client = HTTPClient("127.0.0.1", server.server_port, concurrency=1)
    try:
        h = {"Content-Type": "application/json"}
        ok = send_and_read(client, "/v1/chat/completions", b"{}", h, replica_header="x-served-by")
        assert ok.error is None and len(ok.chunk_times) == 2 and ok.replica == "pod-2"
        bad = send_and_read(client, "/fail", b"{}", h, replica_header="x-served-by")
        assert bad.error == "http" and bad.replica == "pod-9"
        none = send_and_read(client, "/v1/chat/completions", b"{}", h)  # not asked: not read
        assert none.error is None and none.replica is None
        other = send_and_read(client, "/v1/chat/completions", b"{}", h, replica_header="x-replica")
        assert other.replica is None  # asked, but the answer does not carry it
    finally:
        client.close()
