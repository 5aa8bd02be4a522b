"""Record golden wire transcripts from a real vLLM into tests/data/golden/.

    .venv/bin/python -m tests.e2e.record_golden [--out tests/data/golden] [--url URL --model NAME]

Without --url it builds/uses the cached env (tests/e2e/setup_vllm.sh), starts the tiny model with the
default e2e flags, records, stops it; then starts a second server with ``--api-key`` and
``--enable-prompt-tokens-details`` for ``errors_401.json`` and ``chat_stream_cached_details.sse``.

Each exchange goes over a raw socket (HTTP/1.1, ``Connection: close``, ``Accept-Encoding: identity``), so
the recorded body is exactly what vLLM sent, after undoing only the HTTP chunked transfer framing:

- streams:      NAME.sse (body bytes) + NAME.headers.json
- JSON bodies:  NAME.json (body bytes as sent) + NAME.headers.json
- errors:       NAME.json = {"status", "reason", "headers", "body" (parsed), "raw_body", "request"}

NAME.headers.json = {"request", "status", "reason", "http_version", "headers" ([name, value] in order),
"http_chunk_sizes" (the chunked-encoding frame sizes, in order), "recv" ([ms since send, bytes] per
socket read), "sse_event_count"}.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "tests" / "data" / "golden"

SEED = 1234
MAX_TOKENS = 16
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
JSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
# ~700 tokens with the tiny tokenizer: long enough to fill many 16-token prefix-cache blocks.
LONG_PROMPT = (
    "You are a meticulous assistant. Read the following log carefully and summarise it. "
    + " ".join(
        f"Line {i}: request {i * 7 % 97} took {i * 13 % 251} ms with status {200 + i % 3}." for i in range(60)
    )
)


@dataclass
class Exchange:
    request: dict[str, Any]
    status: int
    reason: str
    http_version: str
    headers: list[list[str]]
    body: bytes
    chunk_sizes: list[int] | None
    recv: list[list[float]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def meta(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "status": self.status,
            "reason": self.reason,
            "http_version": self.http_version,
            "headers": self.headers,
            "http_chunk_sizes": self.chunk_sizes,
            "recv": self.recv,
            "sse_event_count": self.body.count(b"\n\n") if self.is_sse else None,
        }

    @property
    def is_sse(self) -> bool:
        return (self.header("content-type") or "").startswith("text/event-stream")


def _dechunk(raw: bytes) -> tuple[bytes, list[int]]:
    body, sizes, i = bytearray(), [], 0
    while True:
        j = raw.index(b"\r\n", i)
        size = int(raw[i:j].split(b";")[0], 16)
        i = j + 2
        if size == 0:
            break
        sizes.append(size)
        body += raw[i : i + size]
        i += size + 2  # data + CRLF
    return bytes(body), sizes


def exchange(
    host: str,
    port: int,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw_body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> Exchange:
    """One HTTP/1.1 request over a fresh socket; returns the response exactly as received."""
    payload = raw_body if raw_body is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {
        "Host": f"{host}:{port}",
        "User-Agent": "vllm-locust-record-golden/1",
        "Accept": "*/*",
        "Accept-Encoding": "identity",
        "Connection": "close",
    }
    if payload is not None:
        hdrs["Content-Type"] = "application/json"
        hdrs["Content-Length"] = str(len(payload))
    hdrs.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    recv: list[list[float]] = []
    buf = bytearray()
    with socket.create_connection((host, port), timeout=timeout) as s:
        t0 = time.perf_counter()
        s.sendall(head.encode() + (payload or b""))
        while True:
            data = s.recv(65536)
            if not data:
                break
            recv.append([round((time.perf_counter() - t0) * 1000, 3), len(data)])
            buf += data
    raw = bytes(buf)
    head_end = raw.index(b"\r\n\r\n")
    lines = raw[:head_end].decode("latin-1").split("\r\n")
    version, status, reason = (lines[0].split(" ", 2) + [""])[:3]
    resp_headers = [[k, v.strip()] for k, v in (ln.split(":", 1) for ln in lines[1:])]
    rest = raw[head_end + 4 :]
    te = next((v for k, v in resp_headers if k.lower() == "transfer-encoding"), "")
    chunk_sizes = None
    if "chunked" in te.lower():
        rest, chunk_sizes = _dechunk(rest)
    shown_headers = {k: v for k, v in hdrs.items() if k.lower() != "authorization"}
    if "Authorization" in hdrs:
        shown_headers["Authorization"] = hdrs["Authorization"]
    req_record: dict[str, Any] = {"method": method, "path": path, "headers": shown_headers}
    if raw_body is not None:
        req_record["raw_body"] = raw_body.decode("utf-8", "replace")
    elif body is not None:
        req_record["body"] = body
    return Exchange(req_record, int(status), reason, version, resp_headers, rest, chunk_sizes, recv)


class Recorder:
    def __init__(self, host: str, port: int, model: str, out: Path):
        self.host, self.port, self.model, self.out = host, port, model, out
        out.mkdir(parents=True, exist_ok=True)
        self.notes: dict[str, Any] = {}

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Exchange:
        return exchange(self.host, self.port, method, path, body, **kw)

    def save_stream(self, name: str, ex: Exchange) -> Exchange:
        if ex.status != 200:
            raise RuntimeError(f"{name}: HTTP {ex.status}: {ex.body[:500]!r}")
        (self.out / f"{name}.sse").write_bytes(ex.body)
        self._meta(name, ex)
        return ex

    def save_body(self, name: str, ex: Exchange, ext: str = "json") -> Exchange:
        if ex.status != 200:
            raise RuntimeError(f"{name}: HTTP {ex.status}: {ex.body[:500]!r}")
        (self.out / f"{name}.{ext}").write_bytes(ex.body)
        self._meta(name, ex)
        return ex

    def save_error(self, name: str, ex: Exchange) -> Exchange:
        try:
            parsed: Any = json.loads(ex.body)
        except ValueError:
            parsed = None
        doc = {
            "status": ex.status,
            "reason": ex.reason,
            "headers": ex.headers,
            "body": parsed,
            "raw_body": ex.body.decode("utf-8", "replace"),
            "request": ex.request,
        }
        (self.out / f"{name}.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        return ex

    def _meta(self, name: str, ex: Exchange) -> None:
        (self.out / f"{name}.headers.json").write_text(
            json.dumps(ex.meta(), indent=2, ensure_ascii=False) + "\n"
        )

    # -- request bodies --------------------------------------------------------------------------------
    def chat(self, content: str = "Write a haiku about load testing.", **extra: Any) -> dict[str, Any]:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "seed": SEED,
        }
        body.update(extra)
        return body

    def completion(self, prompt: str = "def fibonacci(n):", **extra: Any) -> dict[str, Any]:
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "seed": SEED,
        }
        body.update(extra)
        return body


def record_main(rec: Recorder) -> None:
    usage = {"include_usage": True}
    rec.save_body("models", rec.call("GET", "/v1/models"))
    rec.save_body("version", rec.call("GET", "/version"))
    rec.save_stream(
        "chat_stream", rec.call("POST", "/v1/chat/completions", rec.chat(stream=True, stream_options=usage))
    )
    rec.save_stream("chat_stream_no_usage", rec.call("POST", "/v1/chat/completions", rec.chat(stream=True)))
    rec.save_stream(
        "chat_stream_continuous_usage",
        rec.call(
            "POST",
            "/v1/chat/completions",
            rec.chat(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}),
        ),
    )
    rec.save_stream(
        "completions_stream",
        rec.call("POST", "/v1/completions", rec.completion(stream=True, stream_options=usage)),
    )
    rec.save_stream(
        "completions_stream_no_usage", rec.call("POST", "/v1/completions", rec.completion(stream=True))
    )
    rec.save_body("chat_nonstream", rec.call("POST", "/v1/chat/completions", rec.chat()))
    rec.save_body("completions_nonstream", rec.call("POST", "/v1/completions", rec.completion()))
    # ignore_eos: exactly max_tokens tokens, the form load tests use.
    rec.save_stream(
        "chat_stream_ignore_eos",
        rec.call(
            "POST", "/v1/chat/completions", rec.chat(stream=True, stream_options=usage, ignore_eos=True)
        ),
    )
    rec.save_stream(
        "chat_tools_stream",
        rec.call(
            "POST",
            "/v1/chat/completions",
            rec.chat(
                "What is the weather in Paris?",
                stream=True,
                stream_options=usage,
                tools=[WEATHER_TOOL],
                tool_choice={"type": "function", "function": {"name": "get_weather"}},
                max_tokens=32,
            ),
        ),
    )
    rec.save_body(
        "chat_tools_nonstream",
        rec.call(
            "POST",
            "/v1/chat/completions",
            rec.chat(
                "What is the weather in Paris?",
                tools=[WEATHER_TOOL],
                tool_choice={"type": "function", "function": {"name": "get_weather"}},
                max_tokens=32,
            ),
        ),
    )
    rec.save_stream(
        "chat_tools_auto_stream",
        rec.call(
            "POST",
            "/v1/chat/completions",
            rec.chat(
                "What is the weather in Paris?",
                stream=True,
                stream_options=usage,
                tools=[WEATHER_TOOL],
                tool_choice="auto",
            ),
        ),
    )
    rec.save_stream(
        "chat_json_schema_stream",
        rec.call(
            "POST",
            "/v1/chat/completions",
            rec.chat(
                "Give me a person as JSON.",
                stream=True,
                stream_options=usage,
                max_tokens=32,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "person", "schema": JSON_SCHEMA},
                },
            ),
        ),
    )
    cached_body = rec.chat(LONG_PROMPT, stream=True, stream_options=usage)
    first = rec.call("POST", "/v1/chat/completions", cached_body)
    rec.save_stream("chat_stream_cached_first", first)
    rec.save_stream("chat_stream_cached", rec.call("POST", "/v1/chat/completions", cached_body))
    rec.save_body(
        "tokenize",
        rec.call("POST", "/tokenize", {"model": rec.model, "prompt": "Hello, world! def f(x): return x"}),
    )
    rec.save_body(
        "tokenize_chat",
        rec.call(
            "POST",
            "/tokenize",
            {
                "model": rec.model,
                "messages": [{"role": "user", "content": "Hello!"}],
                "add_generation_prompt": True,
            },
        ),
    )
    rec.save_body(
        "detokenize", rec.call("POST", "/detokenize", {"model": rec.model, "tokens": [1000, 2000, 3000]})
    )
    # Errors.
    rec.save_error(
        "errors_bad_json", rec.call("POST", "/v1/chat/completions", raw_body=b'{"model": "x", "messages": [}')
    )
    rec.save_error(
        "errors_missing_field",
        rec.call("POST", "/v1/chat/completions", {"model": rec.model, "max_tokens": 4}),
    )
    rec.save_error(
        "errors_unknown_model",
        rec.call("POST", "/v1/chat/completions", dict(rec.chat(), model="no-such-model")),
    )
    rec.save_error(
        "errors_too_long",
        rec.call("POST", "/v1/completions", rec.completion("hello world " * 3000, max_tokens=8)),
    )
    rec.save_error(
        "errors_max_tokens_too_large",
        rec.call("POST", "/v1/chat/completions", rec.chat(max_tokens=100000)),
    )
    rec.save_error(
        "errors_stream_too_long",
        rec.call(
            "POST", "/v1/chat/completions", rec.chat("hello world " * 3000, stream=True, stream_options=usage)
        ),
    )
    rec.save_error(
        "completions_max_tokens_clamped",
        rec.call("POST", "/v1/completions", rec.completion("hello world " * 390, max_tokens=200)),
    )
    rec.save_error("errors_404_path", rec.call("POST", "/v1/nope", {"model": rec.model}))
    rec.save_body("metrics", rec.call("GET", "/metrics"), ext="txt")
    record_merged(rec)


def record_merged(rec: Recorder, streams: int = 48) -> None:
    """48 concurrent 64-token streams: vLLM then coalesces several tokens into one chunk. Keep the
    stream with the fewest events (load-dependent: the count varies between runs)."""
    from concurrent.futures import ThreadPoolExecutor

    body = rec.chat(stream=True, stream_options={"include_usage": True}, max_tokens=64, ignore_eos=True)

    def one(i: int) -> Exchange:
        return rec.call("POST", "/v1/chat/completions", dict(body, seed=i))

    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(one, range(streams)))
    rec.save_stream("chat_stream_merged_c48", min(results, key=lambda r: r.body.count(b"\n\n")))


def record_auth(rec: Recorder, api_key: str) -> None:
    rec.save_error("errors_401", rec.call("POST", "/v1/chat/completions", rec.chat()))
    rec.save_error(
        "errors_401_wrong_key",
        rec.call("POST", "/v1/chat/completions", rec.chat(), headers={"Authorization": "Bearer wrong-key"}),
    )
    auth = {"Authorization": f"Bearer {api_key}"}
    body = rec.chat(LONG_PROMPT, stream=True, stream_options={"include_usage": True})
    rec.call("POST", "/v1/chat/completions", body, headers=auth)
    rec.save_stream(
        "chat_stream_cached_details", rec.call("POST", "/v1/chat/completions", body, headers=auth)
    )
    rec.save_body(
        "chat_nonstream_cached_details",
        rec.call("POST", "/v1/chat/completions", dict(body, stream=False, stream_options=None), headers=auth),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--url", help="record from this running server instead of starting one (host:port or http://...)"
    )
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--skip-auth", action="store_true", help="do not start the second (--api-key) server")
    args = ap.parse_args(argv)

    if args.url:
        hostport = args.url.split("://", 1)[-1].rstrip("/")
        host, port = hostport.rsplit(":", 1)
        record_main(Recorder(host, int(port), args.model, args.out))
        return 0

    from tests.e2e.vllm_env import ensure_vllm, start_vllm_server

    t0 = time.monotonic()
    env = ensure_vllm()
    print(f"env ready in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    t0 = time.monotonic()
    with start_vllm_server(env) as server:
        print(f"server healthy in {time.monotonic() - t0:.0f} s at {server.url}", file=sys.stderr)
        record_main(Recorder(server.host, server.port, server.model_name, args.out))
    if not args.skip_auth:
        key = "sk-vllm-locust-test"
        t0 = time.monotonic()
        with start_vllm_server(
            env, extra_args=["--api-key", key, "--enable-prompt-tokens-details"]
        ) as server:
            print(f"auth server healthy in {time.monotonic() - t0:.0f} s at {server.url}", file=sys.stderr)
            record_auth(Recorder(server.host, server.port, server.model_name, args.out), key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
