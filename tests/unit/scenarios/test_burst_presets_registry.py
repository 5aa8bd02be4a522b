"""Burst plan and burstiness statistics, presets, and the scenario registry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestration.capacity.sweep import parse_sweep, sweep_doc
from orchestration.commands.run import add_run_parser
from orchestration.server import moe_experts
from orchestration.settings import config as C
from orchestration.settings import presets
from vllm_users.options import RUN, Options, build
from vllm_users.scenarios.burst import BurstPlan, plan_from_options
from vllm_users.scenarios.registry import SCENARIOS, locustfile_source, parse_mix
from vllm_users.workload.arrivals import inter_arrivals


def _cv(x: np.ndarray) -> float:
    return float(np.std(x) / np.mean(x))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_burstiness_half_is_burstier_than_poisson_and_four(seed: int) -> None:
    cv = {b: _cv(inter_arrivals(5000, 10.0, b, seed)) for b in (0.5, 1.0, 4.0)}
    assert cv[0.5] > cv[1.0] > cv[4.0]
    # gamma(k): CV = 1/sqrt(k); 5000 samples put each within a few percent
    for b, v in cv.items():
        assert abs(v - 1 / math.sqrt(b)) < 0.1 / math.sqrt(b)
    assert np.array_equal(inter_arrivals(100, 10.0, 0.5, seed), inter_arrivals(100, 10.0, 0.5, seed))


def test_burst_plan_phases() -> None:
    p = BurstPlan(quiet_users=2, spike_users=20, quiet_s=10, spike_s=5, recover_s=10, cycles=2)
    assert p.total_s == 50
    assert [p.users_at(t) for t in (0, 9.9, 10, 14.9, 15, 24.9, 25, 36, 49.9)] == [
        2,
        2,
        20,
        20,
        2,
        2,
        2,
        20,
        2,
    ]
    assert p.users_at(50) is None and p.phase_at(12) == "spike" and p.phase_at(20) == "recover"


def test_plan_from_options_defaults_to_users() -> None:
    o = build(burst_quiet=2.0, burst_spike=1.0, burst_recover=3.0)
    p = plan_from_options(o.burst, 32)
    assert (p.spike_users, p.quiet_users, p.total_s) == (32, 4, 6.0)
    p = plan_from_options(Options().burst, None)
    assert (p.spike_users, p.quiet_users, p.total_s) == (8, 1, 25.0)
    p = plan_from_options(build(burst_quiet=0.0, burst_recover=0.0, burst_spike_users=4).burst, 32)
    assert (p.spike_users, p.total_s) == (4, 5.0)  # 0 s of quiet is honoured (it is a valid value)


def test_registry_and_generated_locustfile() -> None:
    assert {"chat", "json", "tools", "multi-turn", "burst"} <= set(SCENARIOS)
    assert parse_mix("chat:3,json:1,multiturn") == [("chat", 3), ("json", 1), ("multi-turn", 1)]
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        parse_mix("chat,nope")
    with pytest.raises(ValueError, match="given twice"):
        parse_mix("chat,chat:2")
    ns: dict = {}
    exec(compile(locustfile_source(parse_mix("chat:3,burst:1")), "<gen>", "exec"), ns)
    from locust.util.load_locustfile import is_shape_class, is_user_class

    users = {k: v for k, v in ns.items() if is_user_class(v)}
    assert set(users) == {"ChatUser_chat", "BurstUser_burst"}  # the imported bases do not run as users
    assert users["ChatUser_chat"].weight == 3
    assert [k for k, v in ns.items() if is_shape_class(v)] == ["BurstShape"]


def _parse(argv: list[str], environ: dict[str, str] | None = None) -> Options:
    parser = C.OneLineParser(prog="t")
    run_parser = add_run_parser(parser.add_subparsers(dest="command"))
    return C.parse_options(run_parser, argv, RUN, environ or {})


def test_preset_fills_only_what_was_not_given() -> None:
    argv = ["--preset", "latency", "--output-len", "128", "--input-len", "64"]
    a = _parse(argv)
    assert a.load.users == 1 and a.load.num_prompts == 32 and a.request.ignore_eos is True
    # given (one even equal to the preset's value)
    assert a.request.input_len == 64 and a.request.output_len == 128
    parser = C.OneLineParser(prog="t")
    by_layer, _ = C.layers(add_run_parser(parser.add_subparsers()), argv, RUN, {})
    assert "input_len" not in by_layer["preset"] and "output_len" not in by_layer["preset"]


def test_throughput_preset_respects_closed_loop_choice() -> None:
    a = _parse(["--preset", "throughput", "--users", "4"])
    assert (
        a.load.users == 4
        and a.load.request_rate is None
        and a.load.max_concurrency is None
        and a.load.num_prompts == 512
    )
    a = _parse(["--preset", "throughput"])
    assert (
        a.load.request_rate is not None and math.isinf(a.load.request_rate) and a.load.max_concurrency == 64
    )
    a = _parse(
        ["--preset", "throughput"], {"VLLM_LOCUST_USERS": "4"}
    )  # a choice from the environment counts too
    assert a.load.users == 4 and a.load.request_rate is None


def test_prefix_caching_and_moe_presets() -> None:
    a = _parse(["--preset", "prefix-caching"])
    assert (
        a.scenario.scenario == "multi-turn"
        and a.prefix.prefix_len == 512
        and a.simulator.sim_args == presets.SIM_DETAILS
    )
    a = _parse(["--preset", "prefix-caching", "--host", "http://127.0.0.1:1"])
    assert a.simulator.sim_args == ""  # a real server gets no simulator flags
    a = _parse(["--preset", "moe"])
    assert parse_sweep("concurrency:" + a.capacity.concurrency_sweep).values == (1, 2, 4, 8, 16, 32, 64)
    for name in ("short-long", "long-short"):
        a = _parse(["--preset", name])
        assert (a.request.input_len, a.request.output_len) == (
            (64, 2048) if name == "short-long" else (4096, 128)
        )


def test_sweep_math() -> None:
    for bad in ("concurrency:1,x", "concurrency:0,2", "concurrency:1.5", "rates:", "auto:0", "ramp:1"):
        with pytest.raises(C.UsageError):
            parse_sweep(bad)
    assert parse_sweep("rates:1,2.5").values == (1.0, 2.5) and parse_sweep("auto").values == (5.0,)
    s = sweep_doc(
        parse_sweep("concurrency:1,4"),
        [
            {"kind": "concurrency", "target": 1, "output_throughput": 100.0},
            {"kind": "concurrency", "target": 4, "output_throughput": 300.0},
        ],
        build(sweep="concurrency:1,4", host="", gpu_hour_price=None, gpus=1, preset=None),
    )
    assert [x["scaling_efficiency"] for x in s["steps"]] == [1.0, 0.75]
    b = moe_experts.expert_balance({"0": 10, "1": 10}, {"0": 30, "1": 50})
    assert (
        b is not None and b["max_over_mean"] == pytest.approx(40 / 30) and b["cv"] == pytest.approx(10 / 30)
    )
    assert moe_experts.expert_balance(None, None) is None


def test_preset_scenario_is_not_added_to_a_locustfile() -> None:
    a = _parse(["--preset", "prefix-caching", "-f", "mine.py"])
    # the file's users, with the preset's other defaults
    assert not a.scenario.scenario and a.prefix.prefix_len == 512
    a = _parse(["--preset", "prefix-caching"])
    assert a.scenario.scenario == "multi-turn"
