"""The forms in which servers and proxies send what the stream reader expects: JSON with any spacing, media types in
any case, compressed bodies, and error answers in their several shapes.

vLLM writes compact JSON (pydantic's `model_dump_json`) and the reader's byte searches look for the compact form
(`"finish_reason":"`, `"usage":{`). A proxy that re-serializes each event (Python's `json.dumps`: `"usage": {`),
or a multi-line `data:` event (joined by LF, which JSON reads as whitespace), would escape those searches; such an
event is rewritten compact once (`compact`), and only such an event: telling them apart costs one `find` and two
byte compares per event (`is_compact`).
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any, Protocol

__all__ = [
    "Decoded",
    "Decoding",
    "DecodeError",
    "Feed",
    "body_error",
    "clean_message",
    "compact",
    "decode_all",
    "decoder",
    "error_message",
    "is_compact",
    "is_event_stream",
    "media_type",
    "not_a_stream",
    "stream_error",
    "unasked_coding",
    "unasked_transfer_coding",
]

_WS = frozenset(b" \t\r\n")
_COLON = 58
MAX_MESSAGE = 200  # characters of a server's error message kept in a record


def is_compact(payload: bytes) -> bool:
    """True when an event's JSON object is written without whitespace around its first key (`{"id":"x"...`): how
    vLLM and every compact serializer write it; False for `{ "id"`, `{"id": "x"`, `{"id" :` and for non-objects.

    A serializer puts the same separators everywhere, so the head tells the whole event."""
    if payload[:2] != b'{"':
        return False
    j = payload.find(
        b'"', 2
    )  # the first key's closing quote (a key with an escaped quote: not compact, safe)
    return 0 < j < len(payload) - 2 and payload[j + 1] == _COLON and payload[j + 2] not in _WS


def compact(payload: bytes) -> bytes:
    """The event rewritten as compact JSON (`separators=(",", ":")`, key order kept); unchanged when it is not
    JSON (`[DONE]` is returned stripped of whitespace)."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return payload.strip()
    return json.dumps(doc, separators=(",", ":")).encode()


def media_type(content_type: str) -> str:
    """The media type of a Content-Type value, lower case, without parameters (RFC 9110 §8.3.1: case-insensitive)."""
    return content_type.split(";", 1)[0].strip().lower()


def is_event_stream(content_type: str) -> bool:
    """True for `text/event-stream` in any case and with any parameters (`Text/Event-Stream; charset=utf-8`)."""
    return media_type(content_type) == "text/event-stream"


# ------------------------------------------------------------------------------------------------ compression
class DecodeError(ValueError):
    """A compressed body that does not decode (or an encoding we cannot decode)."""


class Decoding(Protocol):
    """An incremental decoder: bytes in as they arrive, decoded bytes out."""

    def decompress(self, data: bytes) -> bytes: ...  # noqa: D102

    def flush(self) -> bytes: ...  # noqa: D102


class _Brotli:
    def __init__(self) -> None:
        import brotli  # geventhttpclient depends on it; absent, `decoder` refuses br

        self._d = brotli.Decompressor()

    def decompress(self, data: bytes) -> bytes:
        return bytes(self._d.process(data))

    def flush(self) -> bytes:
        return b""


class _Deflate:
    """`deflate` as sent: zlib-wrapped (RFC 9110), or raw deflate as some servers send it (told by the first byte)."""

    def __init__(self) -> None:
        self._d: Any = None

    def decompress(self, data: bytes) -> bytes:
        if self._d is None:
            if not data:
                return b""
            zlib_wrapped = (data[0] & 0x0F) == 8 and len(data) > 1 and ((data[0] << 8) | data[1]) % 31 == 0
            self._d = zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
        return bytes(self._d.decompress(data))

    def flush(self) -> bytes:
        return bytes(self._d.flush()) if self._d is not None else b""


def _have_brotli() -> bool:
    try:
        import brotli  # noqa: F401
    except ImportError:
        return False
    return True


HAVE_BROTLI = _have_brotli()


def unasked_coding(header: str, value: str) -> str:
    """How a failure names a coding the client never asked for (it sends `Accept-Encoding: identity` and no TE)."""
    return f"server sent {header}: {value.strip()}, not asked for"


def unasked_transfer_coding(value: str | list[str] | None) -> str | None:
    """The failure's words for a Transfer-Encoding other than chunked (`gzip, chunked`: RFC 9112 lets a server
    send one only to a client whose TE asked for it, and the HTTP parser leaves it coded); None for chunked."""
    text = ", ".join(value) if isinstance(value, list) else (value or "")
    codings = [c.strip().lower() for c in text.split(",") if c.strip()]
    unasked = [c for c in codings if c not in ("chunked", "identity")]
    return unasked_coding("Transfer-Encoding", ", ".join(unasked)) if unasked else None


def decoder(content_encoding: str) -> Decoding | None:
    """An incremental decoder for a Content-Encoding value (gzip, x-gzip, deflate, br when brotli is installed);
    None for identity or none; DecodeError for an encoding we cannot decode (named in its message)."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise DecodeError(f"Content-Encoding {content_encoding!r}: several codings are not supported")
    c = codings[0]
    if c in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if c == "deflate":
        return _Deflate()
    if c == "br" and HAVE_BROTLI:
        return _Brotli()
    raise DecodeError(f"Content-Encoding {c!r} cannot be decoded")


def decode_all(body: bytes, content_encoding: str) -> bytes:
    """A whole body decoded (preflight, non-streamed answers); DecodeError when it does not decode."""
    d = decoder(content_encoding)
    if d is None:
        return body
    try:
        return d.decompress(body) + d.flush()
    except Exception as e:  # noqa: BLE001 - zlib.error, brotli.error: all mean "not this encoding"
        raise DecodeError(f"{content_encoding} body does not decode: {e}") from None


# ------------------------------------------------------------------------------------------------ error messages
_SECRET = re.compile(
    r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic)\s+)?|(?:bearer|basic)\s+"
    r"|api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"
    r"|\b(?:sk|rk|pk)-[A-Za-z0-9_\-]{8,}"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def clean_message(text: Any) -> str:
    """A server's message fit for a record, a summary and a report: one line, at most MAX_MESSAGE characters,
    credentials that servers echo back (`Bearer ...`, `api_key=...`, `sk-...`) replaced by `***`."""
    s = _CONTROL.sub(" ", str(text)).strip()
    s = _SECRET.sub(lambda m: (m.group(1) or "") + "***", s)
    return s if len(s) <= MAX_MESSAGE else s[: MAX_MESSAGE - 3] + "..."


def error_message(doc: Any) -> str | None:
    """The message of an error answer or event, in any of its shapes: `{"error": {"message": ...}}`,
    `{"error": "..."}`, OpenAI's `{"type": "error", "message": ...}` / `{"type": "error", "error": {...}}`, a failed
    Responses `{"response": {"error": {...}}}`, FastAPI's `{"detail": ...}`; None when `doc` is none of them."""
    if not isinstance(doc, dict):
        return None
    err = doc.get("error")
    if err is None and isinstance(doc.get("response"), dict):
        err = doc["response"].get("error")
    if err is None and (doc.get("type") == "error" or doc.get("object") == "error"):
        err = doc.get("message") or doc.get("detail") or "error"
    if err is None and "detail" in doc and "choices" not in doc:
        err = doc["detail"]
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err.get("type") or json.dumps(err)[:MAX_MESSAGE]
    if err is None or err == "":
        return None
    if isinstance(err, list):  # FastAPI validation errors: a list of {"msg": ...}
        err = "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in err)
    return clean_message(err)


def body_error(body: bytes, content_encoding: str = "") -> str:
    """The message of an error answer's body (decoded when compressed): the server's own words, else its start."""
    try:
        body = decode_all(body, content_encoding)
    except DecodeError:
        return f"a {content_encoding} body that does not decode"
    try:
        doc = json.loads(body)
    except ValueError:
        return clean_message(body[:120].decode("utf-8", "replace")) or "empty body"
    return error_message(doc) or clean_message(doc if isinstance(doc, str) else json.dumps(doc))


def not_a_stream(body: bytes, content_type: str, content_encoding: str) -> tuple[str, str]:
    """(kind, detail) of a 200 to a streamed request that is not an event stream: an error JSON (a gateway's
    `{"error": {...}}`) is the server's error in its words (`inband_error`); anything else is `bad_response`."""
    msg = None
    if "json" in media_type(content_type):
        try:
            msg = error_message(json.loads(decode_all(body, content_encoding)))
        except ValueError:  # DecodeError too
            msg = None
    if msg:
        return "inband_error", msg
    return "bad_response", f"expected text/event-stream, got {content_type or 'no content-type'}"


class Feed(Protocol):
    """What the body reader feeds: the SSE dispatcher (client.stream._Events) or a Decoded in front of it."""

    def feed(self, data: bytes, now: float) -> None: ...  # noqa: D102

    def finish(self, now: float) -> None: ...  # noqa: D102


class Decoded:
    """Decodes a compressed body as it arrives and feeds the SSE dispatcher: each decoded piece keeps the arrival
    time of the bytes it came from (a proxy that flushes its gzip stream per event still has each event timed)."""

    __slots__ = ("events", "dec")

    def __init__(self, events: Feed, dec: Decoding) -> None:
        self.events = events
        self.dec = dec

    def feed(self, data: bytes, now: float) -> None:
        """Decode `data` (DecodeError when it does not decode) and hand what came out on."""
        try:
            out = self.dec.decompress(data)
        except Exception as e:  # noqa: BLE001 - zlib.error, brotli.error
            raise DecodeError(f"compressed stream does not decode: {e}") from None
        if out:
            self.events.feed(out, now)

    def finish(self, now: float) -> None:
        """End of body: what the decoder still holds, then the dispatcher's end."""
        try:
            out = self.dec.flush()
        except Exception:  # noqa: BLE001 - a torn compressed stream: what decoded is what came
            out = b""
        if out:
            self.events.feed(out, now)
        self.events.finish(now)


def stream_error(body: bytes) -> str | None:
    """The first error event of a whole SSE body (the preflight's probe), in the server's words: an `event: error`,
    or an event whose JSON is an error (`{"error": ...}`, OpenAI's `{"type": "error", ...}`); None when none."""
    for block in body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n\n"):
        lines = block.split(b"\n")
        data = b"\n".join(ln[6:] if ln[5:6] == b" " else ln[5:] for ln in lines if ln.startswith(b"data:"))
        named_error = any(ln.startswith(b"event:") and ln[6:].strip() == b"error" for ln in lines)
        if not data or not (named_error or b'"error' in data):
            continue
        try:
            msg = error_message(json.loads(data))
        except ValueError:
            msg = None
        if msg or named_error:
            return msg or clean_message(data.decode("utf-8", "replace"))
    return None
