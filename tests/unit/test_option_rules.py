"""Options check themselves: every group's check() and the rules across groups run wherever an Options is built
(build, changed, a Locust process's from_namespace, Locust's parser), each a UsageError of one line."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from locust.argument_parser import get_parser

import vllm_users.distributed.plugin  # noqa: F401 - registers the table (and its check) on Locust's parser
from vllm_users.errors import UsageError
from vllm_users.options import GROUPS, Options, build, changed, from_namespace

BROKEN = [
    # one group's rules
    ({"ramp_up_strategy": "linear", "num_prompts": 10}, "--ramp-up-strategy needs --ramp-up-start-rps"),
    ({"ramp_up_start_rps": 1.0}, "need --ramp-up-strategy"),
    ({"request_rate": math.inf}, "--request-rate inf needs --num-prompts"),
    ({"users": 4, "request_rate": 2.0}, "give one of them"),
    ({"concurrency_sweep": "1,2", "sweep": "rates:1"}, "--concurrency-sweep is --sweep concurrency"),
    ({"sweep": "rates:"}, "expected rates:1,2,4,8"),
    ({"workers": 0}, "--workers 0 needs --expect-workers"),
    ({"host": "localhost:8000"}, "expected a URL"),
    # across groups
    ({"find_max_rate": True}, "--find-max-rate needs the SLO"),
    ({"find_max_rate": True, "goodput": "ttft:500", "users": 4}, "chooses the rates itself"),
    ({"trace": "t.jsonl", "request_rate": 2.0}, "--trace replays the trace's own schedule"),
    ({"trace": "t.jsonl", "scenario": "chat"}, "leave out --scenario"),
    ({"sweep": "concurrency:1,2", "request_rate": 2.0}, "runs closed loop"),
]


@pytest.mark.parametrize(("values", "said"), BROKEN)
def test_building_options_that_break_a_rule_is_a_one_line_usage_error(
    values: dict[str, Any], said: str
) -> None:
    with pytest.raises(UsageError, match=said) as e:
        build(**values)
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match=said):  # a copy changed into them too
        changed(Options(), **values)


def test_options_that_keep_the_rules_are_built() -> None:
    o = build(
        ramp_up_strategy="linear",
        ramp_up_start_rps=1.0,
        ramp_up_end_rps=4.0,
        num_prompts=10,
        request_rate=4.0,
    )
    assert o.load.ramp_up_end_rps == 4.0
    assert build(find_max_rate=True, class_=("a:weight=1,ttft=500",)).capacity.find_max_rate
    assert build(trace="t.jsonl", scenario="trace").trace.trace == "t.jsonl"


def test_every_group_s_check_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each group that has rules is checked by Options itself, none by hand."""
    with_rules = [(g, cls) for g, cls in GROUPS.items() if callable(getattr(cls, "check", None))]
    assert {"server", "load", "capacity", "processes"} <= {g for g, _ in with_rules}
    for group, cls in with_rules:

        def broken(self: Any, group: str = group) -> None:
            raise UsageError(f"{group} checked")

        with monkeypatch.context() as m:
            m.setattr(cls, "check", broken)
            with pytest.raises(UsageError, match=f"^{group} checked$"):
                Options()


def test_a_locust_namespace_that_breaks_a_rule_is_refused() -> None:
    """A Locust process's options (the web UI's form, the master's spawn message) check the rules too."""
    ns = get_parser().parse_args([])
    ns.ramp_up_strategy, ns.num_prompts = "linear", "10"
    with pytest.raises(UsageError, match="--ramp-up-strategy needs"):
        from_namespace(ns)


def test_locust_s_parser_refuses_a_broken_combination_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        get_parser().parse_args(["--ramp-up-end-rps", "4"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith(
        "error: --ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy linear|exponential\n"
    )
    assert get_parser().parse_args(["--request-rate", "inf", "--num-prompts", "5"]).num_prompts == 5


def test_the_split_groups_keep_every_option_s_name() -> None:
    """The former grab bags are split by feature; each option keeps its name (its flag, env name, config key)."""
    where = {
        "prefix": {"prefix_len", "cache_rate", "num_prefixes"},
        "multiturn": {"num_turns"},
        "tools": {"tool_choice", "tool_followup"},
        "json": {"schema_complexity", "json_schema", "json_mode"},
        "scrape": {"server_metrics", "metrics_header", "no_server_metrics"},
        "prometheus": {"prometheus_port"},
        "preflight": {"reset_prefix_cache", "wait_for_server"},
        "simulator": {"sim_args", "twin"},
        "prompt": {"tokenizer", "dataset", "dataset_format"},
        "outputs": {"output_dir", "run_name", "output_file", "print_result", "no_report", "quiet"},
    }
    for group, names in where.items():
        assert {f.name for f in dataclasses.fields(GROUPS[group])} == names, group
