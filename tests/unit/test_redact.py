"""vllm_users.redact: URL userinfo as Basic auth, the precedence of credentials, and what every writer masks."""

from __future__ import annotations

import base64

import pytest

from orchestration.k8s.render import refuse_credentials
from orchestration.server.metrics_sampler import scrape_target
from vllm_users.errors import UsageError
from vllm_users.options import build, changed
from vllm_users.redact import (
    MASK,
    Redactor,
    connection_headers,
    is_secret_header,
    redact_argv,
    same_origin,
    secret_values,
    split_userinfo,
    without_api_key,
)


def _basic(user: str, pw: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


def test_userinfo_becomes_basic_auth_and_leaves_the_url() -> None:
    assert split_userinfo("http://alice:s%40cret@h:8000/v1?x=1") == (
        "http://h:8000/v1?x=1",
        {"Authorization": _basic("alice", "s@cret")},
    )
    assert split_userinfo("https://bob@h") == ("https://h", {"Authorization": _basic("bob", "")})
    assert split_userinfo("http://h:8000") == ("http://h:8000", {})
    assert split_userinfo("") == ("", {})


def test_precedence_is_curls_header_over_key_over_userinfo() -> None:
    url = "http://u:p@h:1"
    assert connection_headers(url) == ("http://h:1", {"Authorization": _basic("u", "p")})
    assert connection_headers(url, {}, "K")[1] == {"Authorization": "Bearer K"}
    mine = {"authorization": "Token T", "X-Gw": "g"}
    assert connection_headers(url, mine, "K")[1] == mine  # any case of the name counts as given
    assert without_api_key({"Authorization": "Bearer K", "X-Gw": "g"}, "K") == {"X-Gw": "g"}
    assert without_api_key({"Authorization": "Bearer other"}, "K") == {"Authorization": "Bearer other"}


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "Proxy-Authorization",
        "X-Api-Key",
        "Api-Key",
        "Cookie",
        "X-Auth-Token",
        "X-Client-Secret",
        "x-gateway-token",
        "X-Session",
        "apikey",
    ],
)
def test_auth_like_header_names_are_secret(name) -> None:
    assert is_secret_header(name, "v")


def test_values_that_look_like_credentials_are_secret_whatever_the_name() -> None:
    assert is_secret_header("X-Custom", "Bearer abc")
    assert is_secret_header("X-Custom", "sk-proj-4f9a8b7c6d5e4f3a2b1c")  # a long opaque token with digits
    assert not is_secret_header("X-Sim-Fault", "500")
    assert not is_secret_header("X-Tenant", "acme")


def test_argv_keeps_header_names_masks_values_and_drops_userinfo() -> None:
    argv = [
        "run",
        "--host",
        "http://alice:pw1234@h:8000",
        "--api-key",
        "K123",
        "--header",
        "X-Sim-Fault: 500",
        "--header=Authorization: Bearer T123",
        "--metrics-header",
        "X-Api-Key: M123",
        "--api-key=K456",
        "--server-metrics",
        "https://bob:pw5678@m/metrics",
    ]
    out = redact_argv(argv, ["--api-key"], ["--header", "--metrics-header"])
    assert out == [
        "run",
        "--host",
        "http://h:8000",
        "--api-key",
        MASK,
        "--header",
        "X-Sim-Fault: 500",
        f"--header=Authorization: {MASK}",
        "--metrics-header",
        f"X-Api-Key: {MASK}",
        f"--api-key={MASK}",
        "--server-metrics",
        "https://m/metrics",
    ]


def test_redactor_masks_values_tokens_and_userinfo_in_free_text() -> None:
    h = {"Authorization": "Bearer tok-98765", "X-Tenant": "acme"}
    r = Redactor(secret_values(h, "key-12345", ["http://al:pass-777@h"]))
    text = "GET http://al:pass-777@h failed; sent Bearer tok-98765 key-12345 pass-777 for acme"
    out = r.text(text)
    assert not any(s in out for s in ("tok-98765", "key-12345", "pass-777")) and "acme" in out
    assert "http://h" in out


def test_same_origin_defaults_ports() -> None:
    assert same_origin("http://h/metrics", "http://h:80")
    assert not same_origin("http://h:8000/metrics", "http://h:9000")
    assert not same_origin("https://h/metrics", "http://h:443")


def test_metrics_scrape_gets_its_own_url_and_headers() -> None:
    run = {"Authorization": "Bearer K", "X-Gw": "g", "Content-Type": "application/json"}
    o = build(host="http://h:8000")
    assert scrape_target(o.scrape, "http://h:8000", run) == (
        "http://h:8000/metrics",
        {"Authorization": "Bearer K", "X-Gw": "g"},
    )
    other = changed(o, server_metrics="http://prom:9090/metrics")
    assert scrape_target(other.scrape, "http://h:8000", run) == (
        "http://prom:9090/metrics",
        {},
    )  # never sent elsewhere
    own = changed(other, server_metrics="http://m:pw@prom:9090/metrics", metrics_header=("X-M: 1",))
    assert scrape_target(own.scrape, "http://h:8000", run) == (
        "http://prom:9090/metrics",
        {"Authorization": _basic("m", "pw"), "X-M": "1"},
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("host", "http://u:p@vllm:8000"),
        ("header", ("Authorization: Bearer x",)),
        ("metrics_header", ("X-Api-Key: k",)),
    ],
)
def test_k8s_render_keeps_credentials_out_of_the_configmap(field, value) -> None:
    with pytest.raises(UsageError, match="ConfigMap"):
        refuse_credentials(changed(build(host="http://vllm:8000"), **{field: value}))
    refuse_credentials(build(host="http://vllm:8000", header=("X-Sim-Fault: 500",)))  # not a credential


def test_redactor_masks_bytes_too() -> None:
    r = Redactor(secret_values(urls=["http://al:pw-4567@h"]))
    assert r.data(b'<a href="http://al:pw-4567@h/x">tok</a>') == b'<a href="http://***@h/x">tok</a>'


def test_a_message_cut_inside_a_secret_keeps_none_of_it() -> None:
    r = Redactor(["gw-0123456789"])
    assert r.text("refused: {'X-Gateway-Token': 'gw-01234") == "refused: {'X-Gateway-Token': '***"
    assert r.text("refused: gw-") == "refused: gw-"  # shorter than MIN_SECRET_LEN: not a secret's beginning


def test_a_message_cut_inside_a_secret_with_an_ellipsis_keeps_none_of_it() -> None:
    """sse_forms.clean_message cuts a server's message to its length and adds "...": the cut secret's
    beginning then sits before the ellipsis, not at the end."""
    r = Redactor(["gw-0123456789"])
    assert r.text("refused: {'X-Gateway-Token': 'gw-01234...") == "refused: {'X-Gateway-Token': '***..."
    assert r.text("refused: all fine...") == "refused: all fine..."
