"""Bring your own user: `package.module:Class` and `-f FILE` resolve to runnable LLMUser classes, or one-line errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from locust.util.load_locustfile import is_shape_class, is_user_class

from vllm_users.scenarios.loader import UserClassError, load_class, load_file, user_namespace
from vllm_users.scenarios.registry import is_class_ref, locustfile_source, mix_label, parse_mix

EXAMPLES = Path(__file__).resolve().parents[3] / "locustfiles" / "examples"


def test_mix_with_class_references() -> None:
    assert parse_mix("chat:3,vllm_users.scenarios.chat:ChatUser") == [
        ("chat", 3),
        ("vllm_users.scenarios.chat:ChatUser", 0),
    ]
    assert parse_mix("my_agents:Agent:2") == [("my_agents:Agent", 2)]
    assert is_class_ref("pkg.mod:Cls") and not is_class_ref("chat") and not is_class_ref("pkg:1x")
    with pytest.raises(ValueError, match="not an integer"):
        parse_mix("chat:x")
    with pytest.raises(ValueError, match="must be >= 1"):
        parse_mix("pkg.mod:Cls:0")
    with pytest.raises(ValueError, match="neither a scenario"):
        parse_mix("pkg.mod:1bad")
    assert mix_label([("chat", 1), ("pkg.mod:Agent", 0)], ["/x/rag.py"]) == "chat+Agent+rag"


def test_class_reference_runs_with_its_weight_and_scenario_name() -> None:
    ns = user_namespace([("vllm_users.scenarios.json_user:JsonUser", 0), ("chat", 2)])
    users = {k: v for k, v in ns.items() if is_user_class(v)}
    assert set(users) == {"JsonUser", "ChatUser_chat"}
    assert users["JsonUser"].weight == 1 and users["JsonUser"].scenario == "json"
    assert users["ChatUser_chat"].weight == 2


def test_unnamed_scenario_is_the_class_name() -> None:
    from vllm_users import LLMUser

    class Base(LLMUser):
        abstract = True

    class Mine(Base):
        pass

    class Named(LLMUser):
        scenario = "named"

    assert (Mine.scenario, Named.scenario, Base.scenario) == ("Mine", "named", "base")


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("nosuch_pkg.mod:User", "cannot import nosuch_pkg.mod: ModuleNotFoundError"),
        ("vllm_users.scenarios.chat:Nope", "has no attribute 'Nope'"),
        ("os:path", "not a subclass of vllm_users.LLMUser"),
        ("vllm_users.scenarios.base:LLMUser", "is abstract"),
    ],
)
def test_bad_class_references(ref: str, needle: str) -> None:
    with pytest.raises(UserClassError, match=needle):
        load_class(ref)


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_locustfile_users_and_shape(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "mine.py",
        """
        from locust import LoadTestShape
        from vllm_users import LLMUser
        class Helper(LLMUser):
            abstract = True
        class One(Helper):
            pass
        class Two(LLMUser):
            scenario = "two"
            weight = 3
        class Shape(LoadTestShape):
            def tick(self):
                return None
    """,
    )
    users, shapes = load_file(path)
    assert set(users) == {"One", "Two"} and users["Two"].weight == 3
    assert [s.__name__ for s in shapes] == ["Shape"]
    ns: dict = {}
    exec(compile(locustfile_source([], [path]), "<gen>", "exec"), ns)
    assert sorted(k for k, v in ns.items() if is_user_class(v)) == ["One", "Two"]
    assert [k for k, v in ns.items() if is_shape_class(v)] == ["Shape"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("x = 1\n", "no LLMUser subclass in it"),
        ("from vllm_users import LLMUser\nraise RuntimeError('boom')\n", "import failed: RuntimeError: boom"),
        ("import nosuch_module_here\n", "import failed: ModuleNotFoundError"),
        (
            "from locust import HttpUser\nclass Plain(HttpUser):\n    pass\n",
            "Plain is a Locust User but not a vllm_users.LLMUser",
        ),
        ("def broken(:\n", "import failed: SyntaxError"),
    ],
)
def test_bad_locustfiles(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(UserClassError, match=needle):
        load_file(_write(tmp_path, "bad.py", text))
    with pytest.raises(UserClassError, match="no such file"):
        load_file(str(tmp_path / "missing.py"))


def test_checker_process_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.py", "x = 1\n")
    p = subprocess.run(
        [sys.executable, "-m", "vllm_users.scenarios.loader", "-f", bad],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"error: -f {bad}: no LLMUser subclass in it (subclass vllm_users.LLMUser or ChatUser)"
    ]
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_users.scenarios.loader",
            "-f",
            str(EXAMPLES / "agent.py"),
            "--scenario",
            "chat",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert '"AgentUser": {"scenario": "agent", "weight": 1}' in p.stdout
