"""Check the server before any load: reachable, OpenAI-compatible, model known, key accepted, streams SSE."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from orchestration.server.server_wait import STARTING_STATUSES, Wait, not_ready
from vllm_users.client import sse_forms, stdlib_http, tls
from vllm_users.client.endpoints import host_urls
from vllm_users.errors import PreflightError, UsageError  # raised here; importable from here too
from vllm_users.model_mix import model_names
from vllm_users.redact import Redactor, connection_headers, redact_url, secret_values
from vllm_users.workload.calibrate_url import calibrate_url
from vllm_users.workload.prompts import LengthModel


@dataclass
class ServerInfo:
    """What the preflight learned (attempts: HTTP statuses of the streamed test request, retries included)."""

    model: str
    models: list[str]
    attempts: list[int] = field(default_factory=list)


RETRY_STATUSES = (429, 500, 502, 503, 504)  # a loaded or flaky server is still a server: retry these
RETRIES = 3


def _conn(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PreflightError(f"invalid --host {url!r}: expected http://HOST:PORT")
    # stdlib_http's connections skip interim 1xx responses (103 Early Hints from a proxy), which http.client does not;
    # its https:// ones verify the certificate with the run's TLS settings (tls.context(): --ca-bundle, --insecure)
    return stdlib_http.connect(url, timeout)


def _request(
    url: str, method: str, path: str, headers: dict[str, str], body: Any = None, timeout: float = 10.0
) -> tuple[int, str, bytes]:
    status, ctype, raw, _retry_after = _exchange(url, method, path, headers, body, timeout)
    return status, ctype, raw


def _exchange(
    url: str, method: str, path: str, headers: dict[str, str], body: Any = None, timeout: float = 10.0
) -> tuple[int, str, bytes, str | None]:
    """One request: status, content type, body (decoded) and the answer's Retry-After (None: none)."""
    conn, base = _conn(url, timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, base + path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read(1 << 20)
        try:  # a proxy may compress whatever the client accepts (http.client sends `Accept-Encoding: identity`)
            raw = sse_forms.decode_all(raw, resp.getheader("content-encoding") or "")
        except sse_forms.DecodeError as e:
            raise PreflightError(
                f"{url} answered {method} {path} with a body that cannot be read: {e}"
            ) from None
        status: int = resp.status
        return status, resp.getheader("content-type") or "", raw, resp.getheader("retry-after")
    except (
        ssl.SSLError
    ) as e:  # a wrong CA, a bad certificate: the host and the verification failure, one line
        raise PreflightError(tls.describe_error(e, url) or str(e)) from None
    except (ConnectionRefusedError, socket.gaierror, TimeoutError, OSError) as e:
        reason = (
            "connection refused" if isinstance(e, ConnectionRefusedError) else (str(e) or type(e).__name__)
        )
        raise PreflightError(f"cannot reach {url}: {reason}") from None
    except http.client.HTTPException as e:
        raise PreflightError(
            f"{url} sent a malformed HTTP response to {method} {path}: {type(e).__name__}"
        ) from None
    finally:
        conn.close()


Headers = Mapping[str, str] | None


def _auth(url: str, api_key: str | None, headers: Headers) -> tuple[str, dict[str, str]]:
    """The URL without userinfo and every header a request carries: its userinfo < the API key < --header."""
    clean, h = connection_headers(url, headers, api_key)
    return clean, {"Content-Type": "application/json", **h}


# the simulator's per-request fault (docs/simulator.md) is for the load: a preflight sent it would fail by design
LOAD_ONLY_HEADERS = frozenset({"x-sim-fault"})
REJECTED = "rejected the API key or credentials (HTTP {}): set VLLM_LOCUST_API_KEY or --api-key, or a gateway's --header"


def check_server(
    url: str,
    model: str | None,
    api_key: str | None,
    endpoint: str = "chat",
    also: Sequence[str] = (),
    headers: Headers = None,
    wait: Wait | None = None,
) -> ServerInfo:
    """Raise PreflightError with a one-line reason, or return the model to use (a --model mix's base; every name
    of the mix and `also`, the traffic classes' models, must be served: a missing LoRA adapter stops here).
    `headers`: --header's (they win over the API key's Authorization and over the URL's userinfo). Several URLs
    (comma-separated): each is checked the same way, and the line names the one that failed; they must serve the
    same model. `wait` (--wait-for-server): how long a server that refuses or answers 502/503/504 is waited for."""
    urls = host_urls(url) if "," in url else [url]
    first: ServerInfo | None = None
    wait = wait or Wait()
    for u in urls:
        info = _check_one(u, model, api_key, endpoint, also, headers, wait)
        if first is None:
            first = info
        elif info.model != first.model:
            raise PreflightError(
                f"{redact_url(u)} serves model {info.model!r} where {redact_url(urls[0])} serves "
                f"{first.model!r}: the endpoints of one run serve one model (choose it with --model)"
            )
    assert first is not None
    return first


def _check_one(
    url: str,
    model: str | None,
    api_key: str | None,
    endpoint: str,
    also: Sequence[str],
    headers: Headers,
    wait: Wait,
) -> ServerInfo:
    """check_server's checks of one URL."""
    try:
        names = model_names(model or "")
    except ValueError as e:
        raise UsageError(str(e)) from None
    model = names[0] if names else None
    url, h = _auth(url, api_key, headers)
    h = {k: v for k, v in h.items() if k.lower() not in LOAD_ONLY_HEADERS}
    status, ctype, body = _models_when_up(url, h, wait)
    if status == 401 or status == 403:
        raise PreflightError(f"{url} {REJECTED.format(status)}")
    if status != 200:
        raise PreflightError(
            f"{url} is not an OpenAI-compatible server: GET /v1/models returned HTTP {status}"
        )
    try:
        models = [m["id"] for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        kind = ctype.split(";")[0] or "an unknown content type"
        raise PreflightError(
            f"{url} is not an OpenAI-compatible server: GET /v1/models returned {kind}"
        ) from None
    for name in dict.fromkeys((*names, *also)):
        if name not in models:
            what = "model" if name == model else "model (of the mix or a --class)"
            raise PreflightError(
                f"{what} {name!r} is not served by {url} (it serves: {', '.join(models) or 'none'})"
            )
    if not model and len(models) == 1:
        model = models[0]
    elif not model:
        raise PreflightError(
            f"{url} serves {len(models)} models ({', '.join(models)}); choose one with --model"
        )
    attempts: list[int] = []
    i = 0
    while True:  # RETRIES tries, and more while --wait-for-server's time lasts
        last = i >= RETRIES - 1 and wait.deadline - time.monotonic() <= 0
        status = _check_stream(url, model, h, endpoint, last=last)
        attempts.append(status)
        if status == 200:
            break
        if i < RETRIES - 1:
            time.sleep(0.5 * (i + 1))
        else:
            wait.again(url, f"the streamed test request answered HTTP {status}")
        i += 1
    return ServerInfo(model=model, models=models, attempts=attempts)


def _models_when_up(url: str, h: dict[str, str], wait: Wait) -> tuple[int, str, bytes]:
    """GET /v1/models, tried again while the server refuses or answers 502/503/504 and `wait` lasts; a server
    still not up then is a PreflightError naming its last answer."""
    while True:
        try:
            status, ctype, body, retry_after = _exchange(url, "GET", "/v1/models", h)
        except PreflightError as e:
            if "connection refused" not in str(e):  # a wrong host name, TLS: waiting does not mend it
                raise
            if wait.again(url, "connection refused"):
                continue
            if wait.seconds:
                raise not_ready(url, "connection refused", wait) from None
            raise
        if status not in STARTING_STATUSES:
            return status, ctype, body
        what = f"GET /v1/models answered HTTP {status}" + (
            f" (Retry-After: {retry_after})" if retry_after else ""
        )
        if not wait.again(url, what, retry_after):
            raise not_ready(url, what, wait)


# --endpoint -> its probe's path and body (beside "model"); the pooling APIs answer one JSON body, not SSE
_PROBES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "preflight"}],
            "max_tokens": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    "completions": (
        "/v1/completions",
        {"prompt": "preflight", "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}},
    ),
    "responses": ("/v1/responses", {"input": "preflight", "max_output_tokens": 2, "stream": True}),
    "embeddings": ("/v1/embeddings", {"input": "preflight"}),
    "rerank": ("/v1/rerank", {"query": "preflight", "documents": ["preflight"]}),
    "score": ("/v1/score", {"text_1": "preflight", "text_2": ["preflight"]}),
}


def _check_stream(url: str, model: str, h: dict[str, str], endpoint: str, last: bool = True) -> int:
    path, probe = _PROBES.get(endpoint, _PROBES["completions"])
    body: dict[str, Any] = {"model": model, **probe}
    status, ctype, raw = _request(url, "POST", path, h, body, timeout=60.0)
    if status in (401, 403):
        raise PreflightError(f"{url} {REJECTED.format(status)}")
    if status in RETRY_STATUSES and not last:
        return status
    if status in (404, 405) and endpoint != "chat":  # the server lacks the API (pooling models: no chat)
        raise PreflightError(
            f"--endpoint {endpoint}: POST {path} on {url} returned HTTP {status}: the server does "
            "not serve it (docs/scenarios.md)"
        )
    if status != 200:
        msg = sse_forms.body_error(raw[:65536]) if raw else "empty body"
        msg = Redactor(secret_values(h)).text(msg)  # a server may quote the request's credentials
        raise PreflightError(f"POST {path} on {url} failed with HTTP {status}: {msg}")
    kind = sse_forms.media_type(ctype) or "no content type"
    if not probe.get("stream"):
        if "json" not in kind:
            raise PreflightError(
                f"POST {path} on {url} answered {kind}, not JSON; not an OpenAI-compatible server"
            )
        return status
    if not sse_forms.is_event_stream(ctype) or b"data:" not in raw:
        err, detail = sse_forms.not_a_stream(raw, ctype, "")  # a 200 error JSON says what went wrong
        if err == "inband_error":
            detail = Redactor(secret_values(h)).text(detail)
            raise PreflightError(f"POST {path} on {url} answered HTTP 200 with an error: {detail}")
        raise PreflightError(
            f"POST {path} on {url} did not stream SSE (got {kind}); not an OpenAI-compatible server"
        )
    streamed_error = sse_forms.stream_error(raw)
    if streamed_error:
        streamed_error = Redactor(secret_values(h)).text(streamed_error)
        raise PreflightError(f"POST {path} on {url} streamed an error: {streamed_error}")
    return status


def listed_context(url: str, model: str, api_key: str | None, headers: Headers = None) -> int | None:
    """The model's context length as GET /v1/models lists it (`max_model_len`: vLLM and the simulator); None
    when the server does not list one."""
    url, h = _auth(url, api_key, headers)
    status, _ctype, body = _request(url, "GET", "/v1/models", h)
    try:
        listed = next(m.get("max_model_len") for m in json.loads(body)["data"] if m.get("id") == model)
    except (ValueError, KeyError, TypeError, AttributeError, StopIteration):
        return None
    if status != 200 or type(listed) is not int or listed < 1:
        return None
    return listed


def check_context_fits(
    url: str,
    model: str,
    api_key: str | None,
    input_len: int,
    output_len: int,
    overhead: int = 0,
    headers: Headers = None,
) -> int | None:
    """--input-len and --output-len must fit the model's context (`max_model_len` of GET /v1/models, as vLLM and
    the simulator list it), or every request fails with a 400: PreflightError naming both. `overhead`: the tokens
    the server adds around a prompt (BOS, chat template; the calibration's). The context length, or None when the
    server does not list it (then nothing is checked)."""
    listed = listed_context(url, model, api_key, headers)
    if listed is None:
        return None
    where = f"model {model!r} on {url} has max_model_len {listed}"
    prompt = input_len + overhead
    around = f" (+ {overhead} tokens the server adds: template, BOS)" if overhead else ""
    if prompt >= listed:  # vLLM: a prompt must leave room for one generated token
        raise PreflightError(
            f"--input-len {input_len}{around} does not fit: {where}; every request would fail "
            "with HTTP 400 (lower --input-len)"
        )
    if prompt + output_len > listed:
        raise PreflightError(
            f"--input-len {input_len}{around} + --output-len {output_len} = {prompt + output_len} "
            f"tokens do not fit: {where}; every request would fail with HTTP 400 (lower them)"
        )
    return listed


def reset_prefix_cache(url: str, api_key: str | None, headers: Headers = None) -> str:
    """--reset-prefix-cache: POST /reset_prefix_cache (vLLM's endpoint; served with VLLM_SERVER_DEV_MODE=1) before
    the load; the one line to print. Never raises: a server without it gets a warning, the run goes on."""
    url, h = _auth(url, api_key, headers)
    try:
        status, _ctype, raw = _request(url, "POST", "/reset_prefix_cache", h, timeout=30.0)
    except PreflightError as e:
        return f"warning: --reset-prefix-cache: {e}; the prefix cache was not reset"
    if status in (404, 405):
        return (
            f"warning: --reset-prefix-cache: POST /reset_prefix_cache returned HTTP {status} (vLLM serves it "
            "with VLLM_SERVER_DEV_MODE=1); the prefix cache was not reset"
        )
    if status != 200:
        return f"warning: --reset-prefix-cache: POST /reset_prefix_cache returned HTTP {status}; not reset"
    try:
        success = json.loads(raw or b"{}").get("success", True)  # vLLM 0.32 says; older ones answer 200 alone
    except (ValueError, AttributeError):
        success = True
    if success is False:  # vLLM: blocks still held (requests running on the server)
        return "warning: --reset-prefix-cache: the server could not reset its prefix cache (requests still running?)"
    return "prefix cache reset (POST /reset_prefix_cache)"


def calibrate_prompts(
    url: str, model: str, api_key: str | None, endpoint: str = "chat", headers: Headers = None
) -> LengthModel:
    """The run's one prompt-length calibration (bounded: calibration.MAX_PROBES and MAX_SECONDS), handed to every
    worker; `probes` says what it cost, `warning` when it was rejected or cut short. Never raises for the server."""
    url, h = _auth(url, api_key, headers)
    lm = calibrate_url(url, model, endpoint in ("chat", "responses"), h)  # both apply the chat template
    lm.probes["where"] = "preflight"
    return lm
