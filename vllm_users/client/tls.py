"""TLS for every connection to the server, built in one place: the load users, the preflight, calibration, the
/metrics scrape, the profiler calls and health checks all take their client context from `context()`.

Certificates are verified by default, as curl does: against `--ca-bundle FILE`, else `SSL_CERT_FILE`, else the
system's store. `--insecure` skips the verification (the run says so once, and its result records it);
`--client-cert` / `--client-key` present a client certificate (mTLS).

The stamped read over TLS: the kernel stamps the encrypted bytes. Before each record is decrypted, the raw socket's
queue is peeked (recvmsg with MSG_PEEK) up to the end of that record, which gives the receive stamp of the
record's last byte: when it could first be decrypted. Bytes OpenSSL already decrypted (`pending()`) arrived with
the record read before, and carry its stamp.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

from vllm_users.client.options import ServerOptions
from vllm_users.errors import UsageError

__all__ = [
    "TLSConfig",
    "configure",
    "context",
    "current",
    "describe_error",
    "peek_stamp",
    "read_record",
    "ssl_parts",
    "user_context_factory",
]

_HEADER = 5  # a TLS record: type (1), version (2), length (2), then `length` bytes
_PEEK = bytearray(2048)  # peeked bytes are thrown away: one buffer per process; most SSE records fit
_PEEK_VIEW = memoryview(_PEEK)
_TS = struct.Struct("qq")
_ANC = socket.CMSG_SPACE(16)
_PEEK_FLAGS = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)


@dataclass(frozen=True)
class TLSConfig:
    """How connections to an https:// server are secured (the TLS options of the option table)."""

    ca_bundle: str = ""  # PEM file of the CAs to trust ("": SSL_CERT_FILE, else the system's store)
    insecure: bool = False  # no certificate or host name verification
    client_cert: str = ""  # PEM client certificate (mTLS); its key inside it or in client_key
    client_key: str = ""

    @classmethod
    def of(cls, o: ServerOptions) -> TLSConfig:
        """The TLS settings of the server options."""
        return cls(o.ca_bundle or "", bool(o.insecure), o.client_cert or "", o.client_key or "")

    def cafile(self) -> str | None:
        """The CA file to trust: --ca-bundle, else $SSL_CERT_FILE, else None (the system's store)."""
        return self.ca_bundle or os.environ.get("SSL_CERT_FILE") or None

    def metadata(self) -> dict[str, Any]:
        """What the result's run metadata records (file paths only: a certificate file holds no secret we show)."""
        return {
            "insecure": self.insecure,
            "ca_bundle": self.cafile(),
            "client_cert": self.client_cert or None,
        }


_current = TLSConfig()


def configure(cfg: TLSConfig) -> TLSConfig:
    """Make `cfg` this process's TLS settings, once its files load (UsageError naming the option otherwise)."""
    global _current
    if cfg.client_key and not cfg.client_cert:
        raise UsageError("--client-key needs --client-cert (the certificate the key belongs to)")
    context(cfg)  # loads the files now: a bad one is a one-line error before anything is sent
    _current = cfg
    return cfg


def current() -> TLSConfig:
    """This process's TLS settings (TLSConfig() until configure: verify against SSL_CERT_FILE or the system)."""
    return _current


def context(cfg: TLSConfig | None = None, cls: type[ssl.SSLContext] | None = None) -> ssl.SSLContext:
    """The client context for `cfg` (default: this process's), of class `cls` (default: the ssl module's SSLContext
    as it is now: gevent's where gevent patched ssl; gevent sockets need gevent's). Built once per settings."""
    key = (cfg or _current, cls or ssl.SSLContext, os.environ.get("SSL_CERT_FILE"))
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        ctx = _CONTEXTS[key] = _build(key[0], key[1])
    return ctx


_CONTEXTS: dict[tuple[TLSConfig, type[ssl.SSLContext], str | None], ssl.SSLContext] = {}


def _build(cfg: TLSConfig, cls: type[ssl.SSLContext]) -> ssl.SSLContext:
    ctx = cls(
        ssl.PROTOCOL_TLS_CLIENT
    )  # as ssl.create_default_context: TLS 1.2+, host name and certificate checked
    if cfg.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            if cfg.cafile():
                ctx.load_verify_locations(cfg.cafile())
            else:
                ctx.load_default_certs()
        except (OSError, ssl.SSLError) as e:
            what = "--ca-bundle" if cfg.ca_bundle else "SSL_CERT_FILE"
            raise UsageError(f"{what} {cfg.cafile()}: cannot load CA certificates: {_reason(e)}") from None
    if cfg.client_cert:
        try:
            ctx.load_cert_chain(cfg.client_cert, cfg.client_key or None)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(
                f"--client-cert {cfg.client_cert}: cannot load the certificate and key: {_reason(e)}"
            ) from None
    return ctx


def user_context_factory(cfg: TLSConfig) -> Callable[..., ssl.SSLContext]:
    """The `ssl_context_factory` of a load user (geventhttpclient calls it with its own cafile, which is ignored:
    the CAs are ours). Returns gevent's context for `cfg`, one per process."""
    import gevent.ssl

    def factory(**_ignored: Any) -> ssl.SSLContext:
        return context(cfg, gevent.ssl.SSLContext)

    return factory


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLCertVerificationError):
        return str(e.verify_message or e.reason)
    if isinstance(e, ssl.SSLError):  # e.g. reason NO_START_LINE, or args (9, '[SSL] PEM lib (_ssl.c:3905)')
        text = str(e.reason).replace("_", " ").lower() if e.reason else str(e.args[-1] if e.args else e)
        return re.sub(r"^\[\w+\]\s*|\s*\(_ssl\.c:\d+\)$", "", text)
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def describe_error(e: BaseException, url: str) -> str | None:
    """One line for a TLS failure talking to `url` (host and the verification failure), None when `e` is not one."""
    if not isinstance(e, ssl.SSLError):
        return None
    parts = urlsplit(url)
    host = f"{parts.hostname}:{parts.port or 443}"
    if isinstance(e, ssl.SSLCertVerificationError):
        return (
            f"TLS: the certificate of {host} failed verification: {_reason(e)} (--ca-bundle FILE trusts the CA "
            "that signed it; --insecure skips the check)"
        )
    return f"TLS handshake with {host} failed: {_reason(e)}"


# ----- the stamped read over TLS (wire.py's greenlet path and the reactor) -----


def ssl_parts(sock: Any) -> tuple[Any, Any] | None:
    """(SSL object, raw non-blocking socket) of a gevent SSL socket; None for a plain one."""
    sslobj = getattr(sock, "_sslobj", None)
    if sslobj is None:
        return None
    return sslobj, sock._sock


def peek_stamp(raw: Any, wall_minus_perf: float) -> float | None:
    """The kernel's receive stamp (perf_counter s) of the last byte of the first TLS record waiting in `raw`'s queue
    (of what is queued when it is incomplete); None when nothing is queued or stamped. A record that arrived before
    the stamps were switched on (TLS 1.3's session tickets, right after the handshake) has none: then the stamp of
    what is queued behind it, which OpenSSL reads through to the data."""
    try:
        n, anc = _peek(raw, _PEEK)
        if n > _HEADER and anc:
            need = _HEADER + int.from_bytes(_PEEK[3:5], "big")
            if (
                n > need or n == len(_PEEK) < need
            ):  # stamp this record's end: not later ones', not a part of it
                _n, first = _peek(raw, _PEEK_VIEW[:need] if need <= len(_PEEK) else bytearray(need))
                if first:
                    anc = first
    except (BlockingIOError, InterruptedError):
        return None
    return _stamp(anc, wall_minus_perf)


def _peek(raw: Any, buf: Any) -> tuple[int, list[Any]]:
    n, anc, _flags, _addr = raw.recvmsg_into([buf], _ANC, _PEEK_FLAGS)
    return n, anc


def _stamp(anc: list[Any], wall_minus_perf: float) -> float | None:
    if not anc:
        return None
    sec, nsec = _TS.unpack_from(anc[0][2])
    return float(sec + nsec * 1e-9 - wall_minus_perf)


def read_record(
    sslobj: Any, raw: Any, size: int, kernel: bool, wall_minus_perf: float, prev: float
) -> tuple[bytes, float]:
    """Decrypt what one record holds (up to `size` bytes) and when it arrived (never in the future): b"" at the
    end of the connection. ssl.SSLWantReadError when no whole record is in yet (wait for `raw` to be readable).
    `prev`: the stamp of the read before, which bytes decrypted then and still pending carry."""
    if sslobj.pending():
        return _read(sslobj, size), prev
    stamp = peek_stamp(raw, wall_minus_perf) if kernel else None
    data = _read(sslobj, size)
    now = perf_counter()
    return data, (now if stamp is None or stamp > now else stamp)


def _read(sslobj: Any, size: int) -> bytes:
    try:
        data: bytes = sslobj.read(size)
        return data
    except (
        ssl.SSLZeroReturnError,
        ssl.SSLEOFError,
    ):  # close_notify, or a close without it (as gevent reads it)
        return b""
