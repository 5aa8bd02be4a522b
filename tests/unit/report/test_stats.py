"""t-distribution, CIs and the two-sample tests against published values; significance never calls noise a change."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestration.report import stats as S
from orchestration.report.postprocess import RunData
from orchestration.report.significance import compare_pair


@pytest.mark.parametrize(
    ("df", "q"), [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423), (1e6, 1.9600)]
)
def test_t_quantile_table(df: float, q: float) -> None:
    assert S.t_quantile(0.975, df) == pytest.approx(q, abs=1e-4)
    assert S.t_cdf(q, df) == pytest.approx(0.975, abs=1e-5)
    assert S.t_quantile(0.025, df) == pytest.approx(-q, abs=1e-4)


def test_mean_ci() -> None:
    ci = S.mean_ci([10.0, 12.0, 11.0, 13.0])
    sd = float(np.std([10, 12, 11, 13], ddof=1))
    assert ci.mean == 11.5 and ci.half_width == pytest.approx(3.1824 * sd / 2, rel=1e-4)
    assert S.mean_ci([5.0]).half_width is None
    # coverage: ~95 % of CIs from normal samples hold the true mean
    rng = np.random.default_rng(1)
    hits = 0
    cover = []
    for _ in range(2000):
        c = S.mean_ci(rng.normal(7.0, 2.0, 3).tolist())
        cover.append(c.low <= 7.0 <= c.high)
    assert hits == 0 and 0.93 < float(np.mean(cover)) < 0.97


def test_welch_matches_published() -> None:
    r = S.welch_t_test([1, 2, 3], [4, 5, 6])  # scipy.stats.ttest_ind(equal_var=False): t=3.674, p=0.02131
    assert r.statistic == pytest.approx(3.6742, abs=1e-4) and r.p_value == pytest.approx(0.021312, abs=1e-5)
    # unequal sizes and variances: t by hand, p by integrating the t density numerically (independent of betainc)
    x, y = (
        np.array([19.8, 20.4, 19.6, 17.8, 18.5, 18.9, 18.3]),
        np.array([28.2, 26.6, 20.1, 23.3, 25.2, 22.1, 17.7, 27.6, 20.6]),
    )
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    t = (y.mean() - x.mean()) / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    grid = np.linspace(t, 400.0, 2_000_001)
    dens = (
        math.gamma((df + 1) / 2)
        / (math.sqrt(df * math.pi) * math.gamma(df / 2))
        * (1 + grid**2 / df) ** (-(df + 1) / 2)
    )
    p = 2 * float(np.sum((dens[1:] + dens[:-1]) / 2 * np.diff(grid)))
    r = S.welch_t_test(x.tolist(), y.tolist())
    assert r.statistic == pytest.approx(t, rel=1e-9) and r.p_value == pytest.approx(p, abs=1e-5)
    assert S.welch_t_test([1, 1], [1, 1]).p_value == 1.0


def test_mann_whitney() -> None:
    r = S.mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])  # scipy asymptotic, continuity: p=0.01219
    assert r.statistic == 0 and r.p_value == pytest.approx(0.012186, abs=1e-5)
    # ties by hand: ranks of x 1,3,3,6 -> U=3, mu=8, sigma^2=16/12*(9-48/56), z=(5-0.5)/sigma=1.3657, p=0.17203
    r = S.mann_whitney_u([1, 2, 2, 3], [2, 3, 3, 4])
    assert r.statistic == 3 and r.p_value == pytest.approx(0.17203, abs=1e-5)


def test_holm() -> None:
    assert S.holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert S.holm([0.001, 0.2]) == [True, False]


def _run(name: str, arrays: dict[str, np.ndarray], repeats: dict[str, list[float]] | None = None) -> RunData:
    res: dict = {}
    if repeats:
        res["repeats"] = {"metrics": {k: {"values": v} for k, v in repeats.items()}}
    r = RunData(f"/x/{name}", name, res, "records")
    r.arrays = arrays
    return r


def test_noise_is_never_a_change() -> None:
    """Many pairs of same-distribution runs: not one metric called significant (Holm + minimum effect)."""
    rng = np.random.default_rng(7)
    names = [
        "mean_ttft_ms",
        "median_ttft_ms",
        "mean_tpot_ms",
        "median_tpot_ms",
        "p99_ttft_ms",
        "output_throughput",
    ]
    false = 0
    for _ in range(200):
        runs = [
            _run(
                n,
                {"ttft": rng.lognormal(math.log(0.05), 0.5, 300), "tpot": rng.normal(0.01, 0.001, 300)},
                {
                    "output_throughput": rng.normal(1000, 30, 3).tolist(),
                    "p99_ttft_ms": rng.normal(200, 20, 3).tolist(),
                },
            )
            for n in ("a", "b")
        ]
        out = compare_pair(runs[0], runs[1], names)
        false += sum(bool(v["significant"]) for v in out.values())
    assert (
        false <= 4
    )  # family-wise 1 % per pair: ~2 expected of 200 pairs; the minimum effect keeps samples honest


def test_real_change_is_significant() -> None:
    rng = np.random.default_rng(3)
    a = _run("a", {"ttft": rng.lognormal(math.log(0.05), 0.3, 200)}, {"output_throughput": [1000, 1010, 995]})
    b = _run(
        "b", {"ttft": rng.lognormal(math.log(0.07), 0.3, 200)}, {"output_throughput": [1300, 1290, 1310]}
    )
    out = compare_pair(a, b, ["median_ttft_ms", "output_throughput", "p99_ttft_ms"])
    assert out["median_ttft_ms"]["significant"] and out["median_ttft_ms"]["test"] == "Mann-Whitney U"
    assert out["output_throughput"]["significant"] and out["output_throughput"]["test"] == "Welch's t-test"
    assert out["p99_ttft_ms"]["test"] is None and "--repeats" in out["p99_ttft_ms"]["reason"]
