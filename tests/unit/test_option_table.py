"""The option table is the single source: Locust's parser, the run/worker parsers, env names, config keys,
master forwarding, presets as a layer, frozen typed options, and the generated docs/options.md."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from locust.argument_parser import get_parser

import vllm_users.distributed.plugin  # noqa: F401 - registers the table on Locust's parser
from orchestration.commands.run import add_run_parser
from orchestration.settings import config as C
from orchestration.settings import presets
from vllm_users import option_types as T
from vllm_users.distributed.options import headers_from_json
from vllm_users.measure import options as M
from vllm_users.options import (
    CALIBRATE,
    DEFAULTS,
    GROUP_OF,
    GROUPS,
    LOCUST,
    RUN,
    SPECS,
    WORKER,
    Options,
    Spec,
    build,
    changed,
    coerce,
    env_name,
    flag,
    from_namespace,
    locust_argv,
    table,
    value,
)
from vllm_users.workload.classes import _classes_option, class_text
from vllm_users.workload.images import image_sizes

ROOT = Path(__file__).resolve().parents[2]
# a valid value that differs from the default, and an invalid one, per parser
GOOD = {
    T.pos_int: "7",
    T.nonneg_int: "7",
    T.sampling_seed: "7",
    T.pos_float: "0.5",
    T.nonneg_float: "0.5",
    T.rate: "2.5",
    T.ratio: "0.25",
    T.fraction: "0.25",
    T.duration: "90s",
    M.goodput: "ttft:500 tpot:50",
    T.header: "X-A: b",
    T.header_name: "x-served-by",
    M.window: "30s",
    T.text: "x",
    M.percentile_metrics: "e2el",
    M.metric_percentiles: "50,90",
    T.percentile: "95",
    T.port: "8080",
    class_text: "a:weight=2",
    image_sizes: "64x32:2,16x16",
    T.url_base: "http://img.example",
    _classes_option: '[{"name":"a","weight":1.0}]',
    headers_from_json: '{"X-A": "b"}',
}
BAD = {
    T.pos_int: "-5",
    T.nonneg_int: "-1",
    T.sampling_seed: "-2",
    T.pos_float: "-0.5",
    T.nonneg_float: "-1",
    T.rate: "-3",
    T.ratio: "1.5",
    T.fraction: "2",
    T.duration: "5x",
    M.goodput: "ttft:abc",
    T.header: "no colon",
    T.header_name: "x served",
    M.window: "abc",
    M.percentile_metrics: "ttft,latency",
    M.metric_percentiles: "p99",
    T.percentile: "100",
    class_text: "a:weight=x",
    image_sizes: "0x10",
    T.url_base: "ftp://x",
    _classes_option: "[1]",
    headers_from_json: "[]",
}


# a valid value where the parser's generic one breaks a rule of the options (Options checks itself)
# the agents' means are of counts >= 1 (AgentOptions.check)
GOOD_OF = {
    "host": "http://h:8000",
    "sweep": "rates:1,2",
    "agent_turns": "7.25",
    "agent_subagent_turns": "7.25",
    "agent_fanout": "2.25",
    "agent_max_context": "262144",
}
# what an option needs beside it to be a valid set of options (as environment variables)
NEEDS = {
    "ramp_up_strategy": {"ramp_up_start_rps": "1", "ramp_up_end_rps": "2", "num_prompts": "10"},
    "ramp_up_start_rps": {"ramp_up_strategy": "linear", "ramp_up_end_rps": "2", "num_prompts": "10"},
    "ramp_up_end_rps": {"ramp_up_strategy": "linear", "ramp_up_start_rps": "0.1", "num_prompts": "10"},
    "find_max_rate": {"goodput": "ttft:500"},
}


def good_text(spec: Spec, default: Any = None, name: str = "") -> str:
    """A valid value of an option (not its default), as text."""
    if name in GOOD_OF:
        return GOOD_OF[name]
    if spec.choices is not None:
        return next(c for c in reversed(spec.choices) if c != default)
    return "1" if spec.parse is None else GOOD[spec.parse]


def run_parser() -> argparse.ArgumentParser:
    return add_run_parser(C.OneLineParser(prog="t").add_subparsers())


def worker_parser() -> argparse.ArgumentParser:
    p = C.OneLineParser(prog="t")
    C.add_options(p, WORKER, defaults={"master_port": 5557})
    return p


def locust_actions() -> dict[str, argparse.Action]:
    return {a.dest: a for a in get_parser()._actions}


def test_every_option_has_a_parser_a_help_and_a_scope() -> None:
    for name, spec, default in table():
        assert spec.help and spec.scopes and set(spec.scopes) <= {LOCUST, RUN, WORKER, CALIBRATE}, name
        assert spec.parse is None or spec.parse in GOOD, name  # a known parser: validation is named
        if spec.parse is None:
            assert default is False, name
    assert {n for n, _, _ in table()} == set(GROUP_OF)


def test_option_names_are_unique_over_the_groups() -> None:
    """One flag, env name and config key per option: no two groups declare the same field name."""
    names = [f.name for cls in GROUPS.values() for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names)) == len(GROUP_OF)


def test_locust_parser_is_generated_from_the_table() -> None:
    actions = locust_actions()
    for name, spec, default in table(LOCUST):
        a = actions[spec.locust_name or name]
        assert a.default == (spec.text(default) if spec.text is not None else default), name
        assert a.env_var == env_name(spec.locust_name or name), name  # type: ignore[attr-defined]
        if spec.choices and default is not None:
            assert tuple(a.choices) == spec.choices, name
        else:  # no list in Locust's web UI for an option that may be unset (it would pick the first choice)
            assert a.choices is None, name
        # the same validation (where the default is None, Locust's '' or 0 also mean 'not given')
        assert (
            spec.parse is None
            or a.type is spec.parse
            or ((default is None or spec.text is not None) and a.type.__name__ == spec.parse.__name__)
        )


def test_shared_options_have_the_same_default_in_both_parsers() -> None:
    o = C.parse_options(run_parser(), [], RUN, {})
    actions = locust_actions()
    shared = [(n, s, d) for n, s, d in table(LOCUST) if RUN in s.scopes]
    assert len(shared) > 30
    for name, spec, default in shared:
        assert value(o, name) == default == actions[spec.locust_name or name].default, name
    assert from_namespace(get_parser().parse_args([])) == Options()
    ns = get_parser().parse_args(["--request-rate", "0", "--num-prompts", "0"])  # Locust's "not given"
    assert from_namespace(ns).load.request_rate is None and from_namespace(ns).load.num_prompts is None


@pytest.mark.parametrize("scope", [RUN, WORKER])
def test_env_names_and_config_keys_derive_from_the_table(scope: str, tmp_path: Path) -> None:
    """Each option: the flag, VLLM_LOCUST_<NAME> and the config key name (or name-with-dashes) agree."""
    parser = run_parser() if scope == RUN else worker_parser()
    for name, spec, default in table(scope):
        if name in ("config", "preset"):
            continue
        text = good_text(spec, default, name)
        want = coerce(name, text)
        assert want != default, name
        needs = {env_name(k): v for k, v in NEEDS.get(name, {}).items()}
        by_env = C.parse_options(parser, [], scope, {**needs, env_name(name): text})
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps({name.replace("_", "-"): text}))
        # a worker's --config is its master's options file (it takes the users from it, not its own options)
        by_file = C.parse_options(parser, ["--config", str(cfg)], scope, needs) if scope == RUN else by_env
        if spec.parse is None:
            argv = [flag(name)]
        else:
            argv = [flag(name), *text.split()] if spec.many else [flag(name), text]
        by_cli = C.parse_options(parser, argv, scope, needs)
        assert value(by_env, name) == value(by_file, name) == value(by_cli, name) == want, name


def typed(name: str) -> Any:
    """The typed value of good_text for option `name`."""
    return coerce(name, good_text(SPECS[name], DEFAULTS[name], name))


def test_validation_is_the_same_for_locust_and_run() -> None:
    """A bad value fails in both parsers with the same message (plain `locust -f` is as strict as `run`)."""
    lp = get_parser()
    rp = run_parser()
    errors: dict[str, list[str]] = {}

    def fail(p: argparse.ArgumentParser, argv: list[str], key: str) -> None:
        def error(message: str) -> Any:
            errors.setdefault(key, []).append(message)
            raise SystemExit(2)

        p.error = error  # type: ignore[method-assign]
        with pytest.raises(SystemExit):
            p.parse_args(argv)

    checked = 0
    for name, spec, _ in table(LOCUST):
        if RUN not in spec.scopes or spec.parse not in BAD and spec.choices is None:
            continue
        bad = "nope" if spec.choices is not None else BAD[spec.parse]  # type: ignore[index]
        fail(lp, [flag(spec.locust_name or name), bad], name)
        fail(rp, [flag(name), bad], name)
        locust_msg, run_msg = errors[name]
        assert locust_msg.split(":", 1)[1] == run_msg.split(":", 1)[1], (locust_msg, run_msg)
        checked += 1
    assert checked > 25


def test_master_forwarding_round_trips_every_shared_option() -> None:
    """Every option the run shares with Locust reaches the master's (and so the workers') options unchanged."""
    shared = {n: typed(n) for n, s, _ in table(LOCUST) if RUN in s.scopes}
    # a trace is the schedule (no rate, no ramp) and a ramp's rate is its end rate: two runs cover them all
    ramp = {**shared, "trace": "", "ramp_up_end_rps": shared["request_rate"]}
    for values in (ramp, {"trace": shared["trace"]}):
        o = build(**values)
        argv = locust_argv(o, results_dir="/tmp/r", model="m")
        got = from_namespace(get_parser().parse_args(["-f", "x.py", *argv]))
        for name in values:
            want = "m" if name == "model" else values[name]
            assert value(got, name) == want, name
        assert got.handoff.results_dir == "/tmp/r"
        assert "--vllm-t0" not in argv and "--api-key" not in argv  # set by the master; never travels


def test_from_namespace_checks_values_set_as_text() -> None:
    """The web UI and the spawn message set values as they come: the typed options check them again."""
    ns = get_parser().parse_args([])
    ns.input_len, ns.request_rate, ns.num_prompts, ns.ignore_eos = "64", "inf", "9", "true"
    o = from_namespace(ns)
    assert (
        o.request.input_len == 64
        and math.isinf(o.load.request_rate or 0)
        and o.request.ignore_eos is True
        and o.open_loop
    )
    ns.input_len = "-5"
    with pytest.raises(argparse.ArgumentTypeError, match="positive integer"):
        from_namespace(ns)


def test_options_are_frozen() -> None:
    o = Options()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.request.input_len = 5  # type: ignore[misc]
    o2 = from_namespace(get_parser().parse_args(["--input-len", "64"]))  # a Locust process's
    with pytest.raises(dataclasses.FrozenInstanceError):
        o2.request.seed = 3  # type: ignore[misc]
    o3 = C.parse_options(run_parser(), ["--input-len", "64"], RUN, {})  # vllm-locust run's
    with pytest.raises(dataclasses.FrozenInstanceError):
        o3.load.users = 3  # type: ignore[misc]
    assert changed(o3, input_len=32).request.input_len == 32 and o3.request.input_len == 64


def test_preset_is_a_layer_below_file_env_and_command_line(tmp_path: Path) -> None:
    """defaults < preset < config file < environment < command line."""
    p = run_parser()
    cfg = tmp_path / "c.yaml"
    assert C.parse_options(p, [], RUN, {}).request.input_len == 128  # default
    assert C.parse_options(p, ["--preset", "short-long"], RUN, {}).request.input_len == 64  # preset
    cfg.write_text("input_len: 65\n")
    assert (
        C.parse_options(p, ["--preset", "short-long", "--config", str(cfg)], RUN, {}).request.input_len == 65
    )
    env = {"VLLM_LOCUST_INPUT_LEN": "66"}
    assert (
        C.parse_options(p, ["--preset", "short-long", "--config", str(cfg)], RUN, env).request.input_len == 66
    )
    argv = ["--preset", "short-long", "--config", str(cfg), "--input-len", "67"]
    assert C.parse_options(p, argv, RUN, env).request.input_len == 67
    cfg.write_text("preset: short-long\n")  # the preset itself may come from any layer
    o = C.parse_options(p, ["--config", str(cfg)], RUN, {})
    assert (o.request.input_len, o.request.output_len, o.source.preset) == (64, 2048, "short-long")
    o = C.parse_options(p, ["--preset", "latency"], RUN, {"VLLM_LOCUST_REQUEST_RATE": "5"})
    # the preset's users contradict the open loop asked for
    assert o.load.users is None and o.load.request_rate == 5
    by_layer, _ = C.layers(p, ["--preset", "latency"], RUN, {"VLLM_LOCUST_REQUEST_RATE": "5"})
    assert "users" not in by_layer["preset"] and by_layer["env"] == {"request_rate": 5.0}
    with pytest.raises(C.UsageError, match="--preset 'nope'"):
        C.parse_options(p, [], RUN, {"VLLM_LOCUST_PRESET": "nope"})


def test_every_preset_names_options_of_the_table() -> None:
    for name, values in presets.PRESETS.items():
        for key in values:
            assert key in SPECS and RUN in SPECS[key].scopes, (name, key)
        build(**values)  # the right types, and a set of options that keeps the rules


def test_bad_env_and_config_values_name_the_option(tmp_path: Path) -> None:
    p = run_parser()
    with pytest.raises(C.UsageError, match="--users from the environment: 'zero' is not a positive integer"):
        C.parse_options(p, [], RUN, {"VLLM_LOCUST_USERS": "zero"})
    cfg = tmp_path / "c.yaml"
    cfg.write_text("input-len: -5\n")
    with pytest.raises(C.UsageError, match=r"--input-len from config file .*c.yaml: '-5' is not a positive"):
        C.parse_options(p, ["--config", str(cfg)], RUN, {})
    cfg.write_text("workers: 2\nprocesses: 3\n")  # a worker's --config is its master's file: not its options
    o = C.parse_options(worker_parser(), ["--config", str(cfg), "--master-host", "m"], WORKER, {})
    assert (o.source.config, o.processes.processes, o.processes.master_port) == (str(cfg), 1, 5557)


def test_docs_options_md_is_generated_from_the_table() -> None:
    assert (ROOT / "docs" / "options.md").read_text() == C.reference_markdown(), (
        "docs/options.md is stale: python -m orchestration.settings.config > docs/options.md"
    )


def test_readme_options_exist_in_the_run_parser() -> None:
    """Every flag README's options table names is an option of `vllm-locust run`."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text.split("### Main options of `vllm-locust run`", 1)[1].split("\n### ", 1)[0]
    run_flags = {flag(n) for n, _, _ in table(RUN)}
    named = set(re.findall(r"^\| `(--[a-z][a-z-]*)", section, re.M)) | set(
        re.findall(r"^\| `-[a-z]`, `(--[a-z-]*)", section, re.M)
    )
    assert named and named <= run_flags, named - run_flags


def test_secrets_stay_out_of_the_options_repr() -> None:
    o = build(api_key="sk-SECRET", header=("Authorization: Bearer sk-SECRET",))
    assert "sk-SECRET" not in repr(o)
    assert not any(SPECS[n].secret and LOCUST in SPECS[n].scopes and RUN in SPECS[n].scopes for n in SPECS)
