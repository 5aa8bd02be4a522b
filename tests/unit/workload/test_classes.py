"""Traffic classes: the --class syntax, config entries, the draw by weight, the model mix."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from orchestration.settings import config as C
from vllm_users.errors import UsageError
from vllm_users.model_mix import draw_unit, model_names, parse_mix
from vllm_users.options import coerce, env_name, flag
from vllm_users.workload.classes import (
    ClassPlan,
    TrafficClass,
    class_models,
    class_text,
    classes_from_json,
    classes_text,
    from_config,
    parse_class,
    parse_classes,
)


def test_parse_class_every_field() -> None:
    c = parse_class("chat:weight=3,scenario=chat,model=lora-a,priority=-1,ttft=500,tpot=50,e2el=9000")
    assert c == TrafficClass("chat", 3.0, "chat", "lora-a", -1, 500.0, 50.0, 9000.0)
    assert c.slo_ms() == {"ttft": 500.0, "tpot": 50.0, "e2el": 9000.0}
    assert parse_class(c.to_text()) == c
    assert parse_class("batch") == TrafficClass("batch")  # weight 1, nothing else


@pytest.mark.parametrize(
    "bad, says",
    [
        ("a:weight=x", "not a number"),
        ("a:weight=0", "> 0"),
        ("a:colour=red", "unknown item"),
        ("a:priority=1.5", "not an integer"),
        (":weight=1", "expected NAME"),
        ("a:ttft=", "no value"),
        ("a:weight=1,weight=2", "twice"),
        ("a b:weight=1", "expected NAME"),
    ],
)
def test_parse_class_rejects_in_one_line(bad: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as e:
        parse_class(bad)
    assert "\n" not in str(e.value)
    with pytest.raises(argparse.ArgumentTypeError):
        class_text(bad)


def test_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="named twice"):
        parse_classes(["a:weight=1", "a:weight=2"])
    with pytest.raises(UsageError):
        class_models(["a:weight=1", "a:weight=2"])
    assert class_models(["a:model=x", "b", "c:model=x", "d:model=y"]) == ("x", "y")


def test_flag_env_and_config_names() -> None:
    assert flag("class_") == "--class" and env_name("class_") == "VLLM_LOCUST_CLASS"
    assert coerce("class_", ["a:weight=3", "b:weight=1"]) == ("a:weight=3", "b:weight=1")


def test_config_classes_list(tmp_path) -> None:  # noqa: ANN001
    p = tmp_path / "c.yaml"
    p.write_text(
        "classes:\n  - {name: chat, weight: 3, ttft: 500, priority: 0}\n  - batch:weight=1,e2el=60000\n"
    )
    doc = C.load_config(str(p))
    assert doc == {"class_": ["chat:weight=3,priority=0,ttft=500", "batch:weight=1,e2el=60000"]}
    assert parse_class(doc["class_"][0]) == TrafficClass("chat", 3.0, priority=0, ttft=500.0)
    p.write_text("classes:\n  - {name: chat, colour: red}\n")
    with pytest.raises(UsageError, match="unknown key"):
        C.load_config(str(p))
    with pytest.raises(ValueError, match="mapping with a name"):
        from_config(3)


def test_classes_travel_as_json() -> None:
    texts = ["a:weight=3,model=m1,priority=0,ttft=100", "b:weight=1"]
    back = classes_from_json(classes_text(parse_classes(texts)))
    assert back == parse_classes(texts)
    assert json.loads(classes_text(parse_classes(texts)))[0]["name"] == "a"
    assert classes_text(()) == "" and classes_from_json("") == ()


def binomial_bound(n: int, p: float, z: float = 5.0) -> float:
    """z standard deviations of a Binomial(n, p) count (a fair draw falls outside with probability ~6e-7)."""
    return z * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("seed", [0, 1, 42])
def test_draw_follows_the_weights_over_the_global_schedule(seed: int) -> None:
    plan = ClassPlan(parse_classes(["a:weight=3", "b:weight=1"]), None, seed)
    draws = [plan.draw(i).name for i in range(400)]  # type: ignore[union-attr]
    n_a = draws.count("a")
    assert abs(n_a - 300) <= binomial_bound(400, 0.75), n_a  # ±43
    assert draws == [plan.draw(i).name for i in range(400)]  # type: ignore[union-attr]  # deterministic
    assert draws != [ClassPlan(plan.classes, None, seed + 1).draw(i).name for i in range(400)]  # type: ignore[union-attr]


def test_draw_is_not_all_one_class_and_is_uniform() -> None:
    u = [draw_unit(0, i, "class") for i in range(4000)]
    assert all(0 <= x < 1 for x in u)
    assert abs(sum(u) / len(u) - 0.5) < 5 * math.sqrt(1 / 12 / 4000)


def test_a_class_of_another_scenario_is_not_drawn_by_this_user() -> None:
    plan = ClassPlan(
        parse_classes(["c:weight=1,scenario=chat", "j:weight=1,scenario=json", "any:weight=2"]), None, 0
    )
    chat = {plan.draw(i, "chat").name for i in range(200)}  # type: ignore[union-attr]
    assert chat == {"c", "any"}
    assert {plan.draw(i, "json").name for i in range(200)} == {"j", "any"}  # type: ignore[union-attr]


def test_apply_sets_model_and_priority() -> None:
    plan = ClassPlan(
        parse_classes(["hi:weight=1,priority=0,model=lora-a", "lo:weight=1,priority=10"]),
        parse_mix("base:1,lora-b:1"),
        7,
    )
    seen: dict[str | None, set[tuple[str, int]]] = {}
    for i in range(200):
        body: dict = {"model": "base"}
        name = plan.apply(body, i, "chat", None)
        seen.setdefault(name, set()).add((body["model"], body["priority"]))
    assert seen["hi"] == {("lora-a", 0)}  # the class's model wins over the mix
    assert seen["lo"] == {("base", 10), ("lora-b", 10)}  # no model of its own: the mix's
    body = {"model": "base"}
    assert plan.apply(body, 0, "chat", "hi") == "hi" and body == {
        "model": "lora-a",
        "priority": 0,
    }  # a trace's tenant
    body = {"model": "base"}
    assert plan.apply(body, 0, "chat", "tenant-x") == "tenant-x"  # a tenant with no class: kept, model drawn
    assert "priority" not in body


def test_model_mix() -> None:
    mix = parse_mix("base:3,adapter-a:1,adapter-b:1")
    assert mix is not None and mix.names == ("base", "adapter-a", "adapter-b") and mix.base == "base"
    n = 5000
    got = [mix.draw(0, i) for i in range(n)]
    for name, p in (("base", 0.6), ("adapter-a", 0.2), ("adapter-b", 0.2)):
        assert abs(got.count(name) - n * p) <= binomial_bound(n, p), name
    assert parse_mix("org/model:tag").names == ("org/model:tag",)  # type: ignore[union-attr]
    assert not parse_mix("one").is_mix and parse_mix("") is None  # type: ignore[union-attr]
    assert model_names("a:1,b:2") == ("a", "b")
    for bad in ("a:0", "a,a", "a:-1", ",b"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def test_a_class_scenario_must_be_run() -> None:
    from vllm_users.workload.classes import check_scenarios

    check_scenarios(["c:scenario=chat", "any"], ["chat", "json"])
    with pytest.raises(UsageError, match="scenario=json is not run"):
        check_scenarios(["j:scenario=json"], ["chat"])
    check_scenarios(
        ["j:scenario=mine"], ["pkg.mod:Mine"]
    )  # a user class: its scenario is known when it loads
