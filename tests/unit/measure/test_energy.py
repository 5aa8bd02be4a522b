"""The GPU's figures over the measured window (vllm_users.measure.energy), checked by hand: exact joules from the
counter, the power integral where there is none, a counter reset, the window's edges, absent figures."""

from __future__ import annotations

import math

import pytest

from vllm_users.measure import metric_keys as K
from vllm_users.measure.energy import energy_block, gpu_energy, interpolate, power_integral, unwrapped
from vllm_users.measure.gpu_metric_names import ENERGY, POWER, THROTTLE_POWER, THROTTLE_REASONS, UTIL, XID


def test_unwrapped_counts_a_reset_from_zero() -> None:
    pts, resets = unwrapped([(0, 100.0), (1, 150.0), (2, 20.0), (3, 70.0)])
    assert resets == 1
    assert [v for _, v in pts] == [100.0, 150.0, 170.0, 220.0]  # +50, then 20 from 0, then +50


def test_interpolate_and_integral_by_hand() -> None:
    pts = [(0.0, 100.0), (2.0, 300.0)]
    assert interpolate(pts, 1.0) == 200.0
    assert interpolate(pts, 2.5) is None
    # 100 W to 300 W linearly over [0.5, 1.5]: 150 W to 250 W, mean 200 W for 1 s
    assert power_integral(pts, 0.5, 1.5) == pytest.approx(200.0, abs=1e-12)
    assert power_integral(pts, -1.0, 1.0) is None  # the window starts before the first scrape


def test_energy_from_counter_is_exact_inside_the_window() -> None:
    # 0 J at t=0, 100 J at 1, 300 J at 2, 600 J at 3: over [0.5, 2.5] 50 + 200 + 150 = 400 J
    s = {ENERGY: [(0.0, 0.0), (1.0, 100.0), (2.0, 300.0), (3.0, 600.0)], POWER: [(1.0, 100.0), (2.0, 300.0)]}
    f = gpu_energy(s, 0.5, 2.5)
    assert f[K.ENERGY_J] == 400.0 and f["source"] == "counter"
    assert f[K.MEAN_POWER_W] == 200.0
    assert f[K.PEAK_POWER_W] == 300.0


def test_reset_inside_the_window_is_not_summed_negative() -> None:
    s = {ENERGY: [(0.0, 5000.0), (1.0, 5100.0), (2.0, 40.0), (3.0, 140.0)]}
    f = gpu_energy(s, 0.0, 3.0)
    assert f[K.ENERGY_J] == 240.0  # 100 + 40 (from 0 after the reset) + 100
    assert f["counter_resets"] == 1


def test_power_integral_where_there_is_no_counter() -> None:
    s = {POWER: [(0.0, 200.0), (1.0, 200.0), (2.0, 400.0)]}
    f = gpu_energy(s, 0.0, 2.0)
    assert f["source"] == "power_integral"
    assert f[K.ENERGY_J] == 200.0 + 300.0


def test_a_window_the_scrapes_do_not_cover_is_absent_with_its_reason() -> None:
    s = {ENERGY: [(1.0, 0.0), (2.0, 100.0)]}
    f = gpu_energy(s, 0.5, 2.0)
    assert K.ENERGY_J not in f and K.MEAN_POWER_W not in f
    assert "do not cover" in f["absent"][K.ENERGY_J]
    block = energy_block({"n:0": s}, 0.5, 2.0, output_tokens=100, requests=10)
    assert K.ENERGY_J not in block and K.ENERGY_PER_OUTPUT_TOKEN_J not in block
    assert set(block["absent"]) >= {K.ENERGY_J, K.ENERGY_PER_OUTPUT_TOKEN_J, K.ENERGY_PER_REQUEST_J}


def test_run_sums_every_gpu_and_divides_by_the_work() -> None:
    a = {ENERGY: [(0.0, 0.0), (10.0, 3000.0)], POWER: [(0.0, 300.0), (5.0, 300.0), (10.0, 300.0)]}
    b = {ENERGY: [(0.0, 1e6), (10.0, 1e6 + 1000.0)], POWER: [(0.0, 100.0), (5.0, 120.0), (10.0, 100.0)]}
    block = energy_block({"n:0": a, "n:1": b}, 0.0, 10.0, output_tokens=2000, requests=8, energy_price=0.2)
    assert block["gpus"] == 2 and block["source"] == "counter"
    assert block[K.ENERGY_J] == 4000.0
    assert block[K.MEAN_POWER_W] == 400.0
    assert block[K.PEAK_POWER_W] == 420.0  # 300 + 120 at t=5
    assert block[K.ENERGY_PER_OUTPUT_TOKEN_J] == 2.0
    assert block[K.OUTPUT_TOKENS_PER_J] == 0.5
    assert block[K.ENERGY_PER_REQUEST_J] == 500.0
    assert block[K.ENERGY_KWH] == pytest.approx(4000.0 / 3.6e6, rel=1e-15)
    assert block[K.ENERGY_COST_USD] == pytest.approx(4000.0 / 3.6e6 * 0.2, rel=1e-15)
    assert block[K.ENERGY_USD_PER_MILLION_OUTPUT_TOKENS] == pytest.approx(
        4000.0 / 3.6e6 * 0.2 / 2000 * 1e6, rel=1e-12
    )
    assert block["per_gpu"]["n:1"][K.ENERGY_J] == 1000.0


def test_one_gpu_without_coverage_makes_the_run_energy_absent_not_smaller() -> None:
    good = {ENERGY: [(0.0, 0.0), (10.0, 3000.0)]}
    late = {ENERGY: [(5.0, 0.0), (10.0, 3000.0)]}
    block = energy_block({"n:0": good, "n:1": late}, 0.0, 10.0, output_tokens=10, requests=1)
    assert K.ENERGY_J not in block
    assert block["absent"][K.ENERGY_J].startswith("GPU n:1")
    assert block["per_gpu"]["n:0"][K.ENERGY_J] == 3000.0


def test_no_tokens_and_no_requests_give_absent_ratios_never_zero() -> None:
    s = {ENERGY: [(0.0, 0.0), (1.0, 10.0)]}
    block = energy_block({"g": s}, 0.0, 1.0, output_tokens=None, requests=0, energy_price=0.1)
    for key in (
        K.ENERGY_PER_OUTPUT_TOKEN_J,
        K.OUTPUT_TOKENS_PER_J,
        K.ENERGY_PER_REQUEST_J,
        K.ENERGY_USD_PER_MILLION_OUTPUT_TOKENS,
    ):
        assert key not in block and key in block["absent"]


def test_no_gpu_and_no_window() -> None:
    assert energy_block({}, 0.0, 1.0, output_tokens=1, requests=1)["available"] is False
    s = {ENERGY: [(0.0, 0.0), (1.0, 10.0)]}
    assert energy_block({"g": s}, None, None, output_tokens=1, requests=1)["available"] is False


def test_throttling_utilisation_and_xid_inside_the_window_only() -> None:
    s = {
        THROTTLE_REASONS: [(0.0, 0x4), (1.0, 0x4), (2.0, 0x1), (3.0, 0x40), (4.0, 0x4)],
        UTIL: [(0.0, 0.0), (1.0, 90.0), (2.0, 80.0), (3.0, 70.0), (4.0, 0.0)],
        XID: [(0.0, 79.0), (2.0, 0.0), (3.0, 48.0)],
    }
    f = gpu_energy(s, 1.0, 3.0)
    assert f["throttle_power_share"] == pytest.approx(1 / 3)  # 0x4 at 1; idle at 2; thermal at 3
    assert f["throttle_thermal_share"] == pytest.approx(1 / 3)
    assert f[K.GPU_UTIL_MEAN] == 80.0
    assert f["xid_errors"] == [48]  # 79 came before the window


def test_amd_violation_counter_advancing_is_throttling() -> None:
    s = {THROTTLE_POWER: [(0.0, 10.0), (1.0, 10.0), (2.0, 12.0), (3.0, 15.0)]}
    assert gpu_energy(s, 0.0, 3.0)["throttle_power_share"] == pytest.approx(2 / 3)


def test_timeseries_holds_no_nan() -> None:
    a = {POWER: [(0.0, 100.0), (2.0, 100.0)]}
    b = {POWER: [(1.0, 50.0), (2.0, 50.0)]}
    ts = energy_block({"a": a, "b": b}, 1.0, 2.0, output_tokens=1, requests=1)["timeseries"]
    assert ts["power_w"] == [None, 150.0, 150.0]
    assert not any(isinstance(x, float) and math.isnan(x) for x in ts["power_w"])


def test_a_window_between_two_scrapes_has_energy_but_no_peak() -> None:
    s = {ENERGY: [(0.0, 0.0), (2.0, 600.0)], POWER: [(0.0, 300.0), (2.0, 300.0)]}
    block = energy_block({"g": s}, 0.5, 0.6, output_tokens=10, requests=1)
    assert block[K.ENERGY_J] == pytest.approx(30.0) and K.PEAK_POWER_W not in block
    assert block["absent"][K.PEAK_POWER_W].startswith("no power scrape inside")
