"""The preflight's context check: --input-len (with the tokens the server adds) and --output-len must fit the
model's max_model_len as GET /v1/models lists it, or the run stops before its load with one line naming both;
a server that does not list it is not checked (None), never guessed."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orchestration.server.preflight import check_context_fits
from vllm_users.errors import PreflightError

pytestmark = pytest.mark.timeout(30)


@contextmanager
def _models(body: object) -> Iterator[tuple[str, list[str]]]:
    """A server on port 0 whose GET /v1/models answers `body`; yields its URL and the Authorization headers seen."""
    seen: list[str] = []
    raw = json.dumps(body).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *_: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


LISTED = {"data": [{"id": "other", "max_model_len": 64}, {"id": "m", "max_model_len": 1024}]}


def test_lengths_that_fit_return_the_models_context() -> None:
    with _models(LISTED) as (url, seen):
        assert check_context_fits(url, "m", "sk-x", 512, 500, overhead=12) == 1024  # 524 + 500 = 1024: fits
    assert seen == ["Bearer sk-x"]


def test_a_prompt_that_leaves_no_room_names_the_model_and_its_length() -> None:
    with _models(LISTED) as (url, _), pytest.raises(PreflightError) as e:
        check_context_fits(url, "m", None, 1020, 1, overhead=4)  # 1024 prompt tokens: none left to generate
    msg = str(e.value)
    assert "--input-len 1020 (+ 4 tokens the server adds" in msg and "max_model_len 1024" in msg
    assert "\n" not in msg


def test_prompt_and_output_over_the_context_name_their_sum() -> None:
    with _models(LISTED) as (url, _), pytest.raises(PreflightError, match="= 1025 tokens do not fit"):
        check_context_fits(url, "m", None, 512, 513)


@pytest.mark.parametrize(
    "body",
    [
        {"data": [{"id": "m"}]},  # no max_model_len
        {"data": [{"id": "m", "max_model_len": "1024"}]},  # not an int
        {"data": [{"id": "other", "max_model_len": 8}]},  # the model not listed
        {"object": "list"},  # no data
    ],
)
def test_a_server_that_does_not_list_the_context_is_not_checked(body: object) -> None:
    with _models(body) as (url, _):
        assert check_context_fits(url, "m", None, 10**6, 10**6) is None
