"""The public API: the exact exported names, each importable, and `import vllm_users` imports no Locust/gevent."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import vllm_users

EXPORTED = {
    "LLMUser",
    "RequestSpec",
    "Reply",
    "RequestFailure",
    "Ticket",
    "StreamResult",
    "RequestRecord",
    "Prompt",
    "random_words",
    "prompt_source",
    "ChatUser",
    "JsonUser",
    "ToolsUser",
    "MultiTurnUser",
    "BurstUser",
    "BurstShape",
}


def test_exported_names_are_pinned() -> None:
    assert set(vllm_users.__all__) == EXPORTED
    assert len(vllm_users.__all__) == len(EXPORTED)


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_each_name_resolves_to_its_definition(name: str) -> None:
    value = getattr(vllm_users, name)
    assert getattr(value, "__name__", name) == name
    assert value.__module__.startswith("vllm_users.")


def test_unknown_name_and_submodules() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        vllm_users.Nope  # noqa: B018
    from vllm_users import exit_codes  # submodules still import as before

    assert exit_codes.USAGE == 2


def _modules_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "; import sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_import_is_lazy_and_patches_nothing() -> None:
    mods = _modules_after("import vllm_users; assert 'LLMUser' in dir(vllm_users)")
    assert not [
        m for m in mods if m.split(".")[0] in ("gevent", "locust", "geventhttpclient", "ssl", "numpy")
    ]


def test_a_locustfile_import_patches_before_ssl() -> None:
    """`from vllm_users import LLMUser` first in a locustfile: gevent has patched ssl when it is imported."""
    code = (
        "from vllm_users import LLMUser; import ssl, socket, gevent.monkey; "
        "assert gevent.monkey.is_module_patched('ssl') and gevent.monkey.is_module_patched('socket')"
    )
    p = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "monkey" not in p.stderr.lower(), p.stderr
