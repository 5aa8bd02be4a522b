"""Credentials: the headers a request carries (URL userinfo, the API key, --header) and the one place that keeps
them out of everything vllm-locust writes or shows.

- A URL's userinfo (`http://user:pass@host`) becomes `Authorization: Basic base64(user:pass)`, as curl does,
  and the URL is used, stored and shown without it (`split_userinfo`).
- Precedence on `Authorization`, as curl: an explicit header (--header) > the API key (Bearer) > URL userinfo.
- A header is a credential when its name says so (`is_secret_header`: Authorization, Cookie, anything with key,
  token, secret, auth, password, session...) or its value looks like one (an auth scheme, a long opaque token):
  when in doubt its value is redacted.
- `Redactor` holds the run's secret values and masks them in any text; `redact_argv` a command line,
  `redact_url` a URL. Every writer goes through one of these.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = [
    "MASK",
    "Redactor",
    "connection_headers",
    "header_lines",
    "is_secret_header",
    "redact_argv",
    "redact_url",
    "same_origin",
    "secret_values",
    "split_userinfo",
    "with_api_key",
    "without_api_key",
]

MASK = "***"
# a header whose lower-cased name contains one of these carries a credential
_SECRET_NAME_PARTS = (
    "auth",
    "key",
    "token",
    "secret",
    "cookie",
    "session",
    "passw",
    "credential",
    "signature",
    "jwt",
    "csrf",
    "xsrf",
    "bearer",
    "sig",
)
_AUTH_SCHEMES = re.compile(
    r"^\s*(basic|bearer|digest|token|apikey|api-key|negotiate|ntlm|hmac|aws4|sharedkey)\b", re.IGNORECASE
)
_OPAQUE = re.compile(r"^[A-Za-z0-9._~+/=:-]{20,}$")  # a long run without spaces: a token, most likely
# shorter values are masked where they are named (a header's value), not searched for in text
MIN_SECRET_LEN = 4


def is_secret_header(name: str, value: str = "") -> bool:
    """True when header `name` (or its `value`) looks like a credential: its value is never written."""
    low = name.strip().lower()
    if any(p in low for p in _SECRET_NAME_PARTS):
        return True
    return bool(_AUTH_SCHEMES.match(value)) or bool(_OPAQUE.match(value.strip()) and re.search(r"\d", value))


def header_lines(lines: Iterable[str]) -> dict[str, str]:
    """'Name: value' lines (--header, --metrics-header) as a dict, in order (a later name wins)."""
    return {h.partition(":")[0].strip(): h.partition(":")[2].strip() for h in lines}


def _has(headers: Mapping[str, str], name: str) -> bool:
    return any(k.lower() == name.lower() for k in headers)


def split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without its userinfo, {"Authorization": "Basic ..."} from it, or {}): curl's `http://u:p@host`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, {}
    if "@" not in parts.netloc:
        return url, {}
    userinfo, _, hostport = parts.netloc.rpartition("@")
    clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return clean, {"Authorization": f"Basic {token}"}


def redact_url(url: str) -> str:
    """`url` without its userinfo (the form every file and line shows)."""
    return split_userinfo(url)[0]


def with_api_key(headers: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    """`headers` plus `Authorization: Bearer KEY`, unless they carry an Authorization of their own (--header wins)."""
    out = dict(headers)
    if api_key and not _has(out, "Authorization"):
        out["Authorization"] = f"Bearer {api_key}"
    return out


def connection_headers(
    url: str, explicit: Mapping[str, str] | None = None, api_key: str | None = None
) -> tuple[str, dict[str, str]]:
    """(the URL without userinfo, every header a request to it carries): userinfo < API key < `explicit` (--header)."""
    clean, basic = split_userinfo(url)
    base = {} if api_key else basic  # the API key's Bearer takes Authorization over URL userinfo
    return clean, with_api_key({**base, **(explicit or {})}, api_key)


def without_api_key(headers: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    """`headers` less the API key's own Authorization (the key travels in the environment, never with options)."""
    return {
        k: v
        for k, v in headers.items()
        if not (api_key and k == "Authorization" and v == f"Bearer {api_key}")
    }


def _origin(url: str) -> tuple[str, str | None, int | None]:
    p = urlsplit(url)
    return p.scheme, p.hostname, p.port or {"http": 80, "https": 443}.get(p.scheme)


def same_origin(a: str, b: str) -> bool:
    """True when URLs `a` and `b` name the same scheme, host and port (credentials may follow from one to the other)."""
    try:
        return _origin(a) == _origin(b)
    except ValueError:
        return False


def secret_values(
    headers: Mapping[str, str] = {},
    api_key: str | None = None,  # noqa: B006 - never mutated
    urls: Sequence[str] = (),
) -> list[str]:
    """The strings that must never be written: secret headers' values (and a scheme's token alone), the API key,
    the userinfo of `urls` (the password, raw and percent-decoded, and the Basic token)."""
    out: list[str] = []
    for k, v in headers.items():
        if is_secret_header(k, v):
            out.append(v)
            scheme, _, token = v.strip().partition(" ")
            if token and _AUTH_SCHEMES.match(scheme):
                out.append(token.strip())
    if api_key:
        out.append(api_key)
    for url in urls:
        try:
            netloc = urlsplit(url).netloc
        except ValueError:
            continue
        if "@" in netloc:
            userinfo = netloc.rpartition("@")[0]
            password = userinfo.partition(":")[2]
            out += [
                userinfo,
                password,
                unquote(password),
                split_userinfo(url)[1]["Authorization"].split(" ", 1)[1],
            ]
    return sorted({s for s in out if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)


class Redactor:
    """Masks a fixed set of secret values (longest first) in any text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)

    def text(self, s: str) -> str:
        """`s` with every secret value and URL userinfo masked, and a secret's beginning where `s` ends in one (a
        message cut to a length inside a credential it quoted)."""
        for secret in self.secrets:
            s = s.replace(secret, MASK)
        # a cut message may end in an ellipsis after the secret's beginning (sse_forms.clean_message adds "...")
        ellipsis = next((e for e in ("...", "\u2026") if s.endswith(e)), "")
        s = s[: len(s) - len(ellipsis)]
        for secret in self.secrets:
            cut = next(
                (n for n in range(len(secret) - 1, MIN_SECRET_LEN - 1, -1) if s.endswith(secret[:n])), 0
            )
            if cut:
                s = s[:-cut] + MASK
        return _USERINFO.sub(r"\1", s + ellipsis)

    def data(self, b: bytes) -> bytes:
        """The secret values of `b` masked (a web page, a script, a download: URL-like text there is left alone,
        a password in a URL is among the values)."""
        for secret in self.secrets:
            b = b.replace(secret.encode(), MASK.encode())
        return b


# scheme://user:pass@ inside free text (an error message, a log line): the userinfo dropped
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/@'\"]*@")


def redact_argv(
    argv: Sequence[str], secret_flags: Iterable[str], header_flags: Iterable[str] = ()
) -> list[str]:
    """A command line as it may be written: the values of `secret_flags` masked, credentials among the
    'Name: value' of `header_flags` masked, every URL's userinfo dropped."""
    secret, headers = tuple(secret_flags), tuple(header_flags)
    out: list[str] = []
    pending = ""
    for x in argv:
        if pending:
            out.append(_header_item(x) if pending in headers else MASK)
            pending = ""
            continue
        flag, eq, value = x.partition("=")
        if x in secret or x in headers:
            out.append(x)
            pending = x
        elif eq and flag in headers:
            out.append(f"{flag}={_header_item(value)}")
        elif eq and flag in secret:
            out.append(f"{flag}={MASK}")
        else:
            out.append(_USERINFO.sub(r"\1", x))
    return out


def _header_item(item: str) -> str:
    name, sep, value = item.partition(":")
    if not sep:
        return MASK
    return f"{name}: {MASK}" if is_secret_header(name, value.strip()) else f"{name}:{value}"
