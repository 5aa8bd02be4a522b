"""A web UI open to the network needs --web-login or --web-open; the LLM tab's words for who can reach it."""

from __future__ import annotations

import pytest

from vllm_users.distributed.options import is_loopback, web_access
from vllm_users.errors import UsageError
from vllm_users.options import build


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "gpu-box.example"])
def test_an_open_web_ui_without_a_login_is_refused_in_one_line(host: str) -> None:
    with pytest.raises(UsageError) as e:
        build(web_ui=True, web_host=host)
    said = str(e.value)
    assert "\n" not in said and "--web-login" in said and "--web-open" in said and host in said


@pytest.mark.parametrize(
    "values",
    [
        {"web_ui": True, "web_host": "0.0.0.0", "web_login": True},
        {"web_ui": True, "web_host": "0.0.0.0", "web_open": True},
        {"web_ui": True, "web_host": "127.0.0.1"},
        {"web_ui": True, "web_host": "localhost"},
        {"web_ui": True, "web_host": "::1"},
        {"web_host": "0.0.0.0"},  # no web UI: nothing listens
    ],
)
def test_a_login_an_explicit_acceptance_or_loopback_is_built(values: dict[str, object]) -> None:
    assert build(**values).processes.web_host == values["web_host"]


def test_loopback_and_the_tab_s_words() -> None:
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and not is_loopback("0.0.0.0")
    assert web_access("127.0.0.1", False) == "this machine only (127.0.0.1)"
    assert "behind --web-login" in web_access("0.0.0.0", True)
    assert "no login" in web_access("*", False)
