"""`vllm-locust gate` on synthetic samples: its statistics are the result's figures; a known shift is detected and no
shift is not flagged more often than its level allows; the same seed gives the same verdicts; rules, repeats,
baseline files, mismatched settings and the four outputs."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from orchestration.commands.gate import main
from orchestration.gate.output import console, junit, markdown
from orchestration.gate.rules import DEFAULT_RULES, Rule, parse_rules
from orchestration.gate.samples import FAILED, OK, RunSamples, Side, load_side, save_baseline
from orchestration.gate.statistics import (
    block_counts,
    block_length,
    counts_of_blocks,
    statistic_for,
    weighted,
)
from orchestration.gate.verdict import evaluate, gate
from tests.unit.report.helpers import make_records, write_run
from vllm_users import errors, exit_codes

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = {"model_id": "m", "endpoint": "chat", "input_len": 100, "output_len": 16, "users": 8}


def synthetic(
    n: int = 300,
    *,
    tpot_ms: float = 10.0,
    ttft_ms: float = 20.0,
    tokens: int = 16,
    fail: float = 0.0,
    concurrency: int = 8,
    seed: int = 0,
    cached: bool = False,
) -> RunSamples:
    """A closed-loop-looking run: `concurrency` lanes back to back, log-normal TTFT and TPOT per request."""
    rng = np.random.default_rng(seed)
    ttft = ttft_ms * rng.lognormal(0.0, 0.25, n)
    tpot = tpot_ms * rng.lognormal(0.0, 0.08, n)
    failed = rng.random(n) < fail
    rel = np.stack([ttft + k * tpot for k in range(tokens)], axis=1)  # ms from each request's start
    e2el = rel[:, -1] / 1e3 + 0.0005
    start = np.zeros(n)
    lane_t = np.zeros(concurrency)
    for i in range(n):
        start[i] = lane_t[i % concurrency]
        lane_t[i % concurrency] += e2el[i] + 0.0006
    order = np.argsort(start, kind="stable")
    start, e2el, rel, failed = start[order], e2el[order], rel[order], failed[order]
    outcome = np.where(failed, FAILED, OK).astype(np.int8)
    lens = np.where(failed, 0, tokens).astype(np.int64)
    return RunSamples(
        name=f"s{seed}",
        settings=dict(SETTINGS),
        figures={},
        start=start,
        end=start + e2el,
        outcome=outcome,
        out_tok=np.where(failed, -1, tokens).astype(np.int64),
        in_tok=np.where(failed, -1, 100).astype(np.int64),
        cached=np.where(failed | (not cached), -1, 40).astype(np.int64),
        valid=np.full(n, -1, np.int8),
        good=np.full(n, -1, np.int8),
        lens=lens,
        chunks=(rel[~failed] * 1e3).astype(np.int64).ravel(),
    )


def side(*runs: RunSamples) -> Side:
    return Side(runs[0].name, "repeats" if len(runs) > 1 else "run", list(runs))


# ------------------------------------------------------------------------------------- definitions
def test_every_statistic_is_the_results_figure(tmp_path: Path) -> None:
    recs = make_records(300, ttft_ms=20, itl_ms=7, fail=12, cached_fraction=0.4, tail_every=37, tail_ms=400)
    run_dir = write_run(str(tmp_path / "r"), recs)
    res = json.load(open(os.path.join(run_dir, "result.json")))
    run = load_side(run_dir).runs[0]
    names = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std")]
    names += [
        "p99_ttft_ms",
        "p99_tpot_ms",
        "p99_itl_ms",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "prefix_cache_hit_rate",
        "chunk_token_ratio",
    ]
    for name in names:
        stat = statistic_for(name)
        assert stat is not None, name
        assert stat.point(run) == pytest.approx(res[name], rel=1e-6), name  # durations: epoch float rounding
    err = statistic_for("error_rate")
    assert err is not None and err.point(run) == pytest.approx(
        res["failed"] / (res["completed"] + res["failed"])
    )
    assert statistic_for("max_output_tokens_per_s") is None  # a maximum: no bootstrap estimate of its noise
    assert statistic_for("max_ttft_ms") is None and statistic_for("p100_ttft_ms") is None
    assert statistic_for("p99.9_ttft_ms") is not None


def test_blocks() -> None:
    assert block_length(200, 8.0) == 8  # the concurrency
    assert block_length(8000, 2.0) == 20  # n^(1/3)
    assert block_length(30, 8.0) == 3  # ten blocks at least
    rng = np.random.default_rng(0)
    for n, length in ((10, 3), (10, 10), (11, 2), (200, 8), (1, 1)):
        starts = rng.integers(0, n, (50, -(-n // length)))
        # the draws one by one: blocks of consecutive units wrapping around the end, cut at n
        draws = ((starts[:, :, None] + np.arange(length)) % n).reshape(50, -1)[:, :n]
        by_hand = np.stack([np.bincount(row, minlength=n) for row in draws])
        assert (counts_of_blocks(starts, n, length) == by_hand).all(), (n, length)
    assert (block_counts(97, 5, 20, rng).sum(axis=1) == 97).all()


def test_weighted_statistics_are_numpys() -> None:
    rng = np.random.default_rng(1)
    values = np.sort(rng.lognormal(0, 1, 37))
    w = rng.integers(0, 4, (30, 37))
    w[:, 0] += 1  # no empty row
    pooled = [np.repeat(values, row) for row in w]
    for stat, ref in (
        ("mean", np.mean),
        ("std", np.std),
        ("median", np.median),
        ("p99", lambda a: np.percentile(a, 99)),
        ("p12.5", lambda a: np.percentile(a, 12.5)),
    ):
        assert weighted(stat, values, w) == pytest.approx([ref(p) for p in pooled], rel=1e-9), stat


# ------------------------------------------------------------------------------------- statistics
def test_a_known_shift_is_detected_every_time() -> None:
    rules = parse_rules(None)
    for seed in range(10):
        rep = gate(
            side(synthetic(seed=seed)), side(synthetic(tpot_ms=11.5, seed=100 + seed)), rules, resamples=1000
        )
        verdicts = {r.metric: r.verdict for r in rep.results}
        assert verdicts["median_tpot_ms"] == "regressed", rep.results
        assert rep.exit_code == exit_codes.GATE_REGRESSED
    faster = gate(side(synthetic(seed=1)), side(synthetic(tpot_ms=8.5, seed=2)), rules, resamples=1000)
    assert {r.metric: r.verdict for r in faster.results}["median_tpot_ms"] == "improved"
    assert faster.exit_code == exit_codes.OK


def test_no_shift_is_flagged_at_most_at_the_level() -> None:
    # limit 0: "regressed" is then a one-sided test at (1 - level) / 2; 200 independent A/A pairs
    rule = Rule("median_tpot_ms", 0.0, "%")
    level, trials = 0.90, 200
    flagged = covered = 0
    for seed in range(trials):
        r = evaluate(
            rule,
            side(synthetic(seed=seed)),
            side(synthetic(seed=10_000 + seed)),
            level=level,
            resamples=500,
            seed=seed,
        )
        assert r.ci_low is not None and r.ci_high is not None
        flagged += r.verdict == "regressed"
        covered += r.ci_low <= 0.0 <= r.ci_high
    # expected 10 flagged (5 %) and 180 covered; the bounds are ~4 binomial standard deviations away
    assert flagged <= 22, flagged
    assert covered >= 0.80 * trials, covered
    # at the default limits, identical settings are never flagged
    rules = parse_rules(None)
    assert not any(
        gate(side(synthetic(seed=s)), side(synthetic(seed=500 + s)), rules, resamples=500).regressed
        for s in range(10)
    )


def test_same_seed_same_verdicts() -> None:
    a, b = side(synthetic(seed=1)), side(synthetic(tpot_ms=10.4, seed=2))
    rules = parse_rules(None)
    one, two = gate(a, b, rules, resamples=500, seed=7), gate(a, b, rules, resamples=500, seed=7)
    assert [r.to_dict() for r in one.results] == [r.to_dict() for r in two.results]
    other = gate(a, b, rules, resamples=500, seed=8)
    assert [r.ci_low for r in other.results] != [r.ci_low for r in one.results]
    # a rule's interval does not move when another rule is added
    alone = gate(a, b, [rules[2]], resamples=500, seed=7, confidence=0.99)  # the level of each of the 5
    assert alone.results[0].ci_low == pytest.approx(one.results[2].ci_low)


def test_error_rate_in_points_and_a_zero_baseline() -> None:
    base, cand = side(synthetic(seed=1)), side(synthetic(seed=2, fail=0.10))
    r = evaluate(Rule("error_rate", 0.5, "pp"), base, cand, level=0.99, resamples=1000)
    assert r.verdict == "regressed" and r.change == pytest.approx(
        100 * (cand.runs[0].outcome == FAILED).mean()
    )
    same = evaluate(Rule("error_rate", 0.5, "pp"), base, side(synthetic(seed=3)), level=0.99, resamples=1000)
    assert same.verdict == "unchanged" and same.change == 0
    rel = evaluate(Rule("error_rate", 10, "%"), base, cand, level=0.99, resamples=1000)
    assert rel.verdict == "inconclusive" and "relative change is undefined" in rel.reason


def test_repeats_use_their_spread() -> None:
    def runs(tpot: float, seed: int) -> list[RunSamples]:
        return [synthetic(tpot_ms=tpot * (1 + 0.01 * k), seed=seed + k) for k in range(5)]

    rule = Rule("median_tpot_ms", 5.0, "%")
    slow = evaluate(rule, side(*runs(10.0, 0)), side(*runs(12.0, 50)), level=0.99)
    assert slow.verdict == "regressed" and slow.method.startswith("Welch t-interval over repeats (5+5)")
    same = evaluate(rule, side(*runs(10.0, 0)), side(*runs(10.0, 50)), level=0.99)
    assert same.verdict != "regressed"
    one = evaluate(rule, side(*runs(10.0, 0)), side(synthetic(tpot_ms=13.0, seed=9)), level=0.99)
    assert one.verdict == "regressed" and one.method.startswith(
        "t prediction interval: 1 run against 5 repeats"
    )
    # a figure with no per-request samples: tested over repeats, not between two single runs
    fig = Rule("max_output_tokens_per_s", 5.0, "%")
    a, b = runs(10.0, 0), runs(10.0, 50)
    for k, x in enumerate(a + b):
        x.figures["max_output_tokens_per_s"] = 1000.0 + k % 5
    assert evaluate(fig, side(*a), side(*b), level=0.99).verdict == "unchanged"
    untested = evaluate(fig, side(a[0]), side(b[0]), level=0.99)
    assert untested.verdict == "inconclusive" and "use --repeats" in untested.reason


def test_too_few_samples_is_inconclusive() -> None:
    r = evaluate(Rule("median_tpot_ms", 5, "%"), side(synthetic(10)), side(synthetic(10, seed=1)), level=0.99)
    assert r.verdict == "inconclusive" and "too few samples" in r.reason


# ------------------------------------------------------------------------------------- rules
def test_rules() -> None:
    assert [r.text for r in parse_rules(None)] == list(DEFAULT_RULES)
    rules = parse_rules(["defaults", "p99_ttft_ms:20%", "p99_itl_ms:3ms"])
    assert [r.text for r in rules][-2:] == ["p99_ttft_ms:20%", "p99_itl_ms:3ms"] and len(rules) == 6
    assert parse_rules(["error_rate:0.5pp output_throughput:50"])[1] == Rule("output_throughput", 50.0, "abs")
    assert (
        Rule("output_throughput", 5, "%").worse == "lower" and Rule("p99_ttft_ms", 5, "%").worse == "higher"
    )
    assert Rule("error_rate", 1, "pp").worse == "higher" and Rule("duration", 5, "%").worse == "either"
    for bad in ("p99_ttft_ms", "p99_ttft_ms:fast", "output_throughput:1pp", "output_throughput:5ms", ":5%"):
        with pytest.raises(errors.UsageError, match="--max-regression"):
            parse_rules([bad])


# ------------------------------------------------------------------------------------- outputs
def test_outputs_say_the_same() -> None:
    rep = gate(side(synthetic(seed=1)), side(synthetic(tpot_ms=12, seed=2)), parse_rules(None), resamples=500)
    text = console(rep)
    assert "median_tpot_ms:5%" in text and "regressed" in text and "block bootstrap" in text
    assert text.rstrip().endswith(f"-> exit {exit_codes.GATE_REGRESSED}")
    suite = ET.fromstring(junit(rep)).find("testsuite")
    assert suite is not None and suite.get("tests") == "5"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["median_tpot_ms:5%"].find("failure") is not None
    assert suite.get("failures") == str(len(rep.regressed))
    assert all(
        (c.find("skipped") is not None) == (r.verdict == "inconclusive")
        for c, r in zip(cases.values(), rep.results, strict=True)
    )
    md = markdown(rep)
    assert "| `median_tpot_ms:5%` |" in md and "**regressed**" in md and "Bonferroni" in md
    doc = rep.to_dict()
    assert doc["exit_code"] == exit_codes.GATE_REGRESSED and "median_tpot_ms" in doc["regressed"]
    json.dumps(doc)


# ------------------------------------------------------------------------------------- the command
def _runs(tmp_path: Path) -> tuple[str, str, str]:
    a = write_run(str(tmp_path / "a"), make_records(240, itl_ms=10, seed=1))
    b = write_run(str(tmp_path / "b"), make_records(240, itl_ms=10, seed=2))
    slow = write_run(str(tmp_path / "slow"), make_records(240, itl_ms=12, seed=3))
    return a, b, slow


def test_command_exit_codes_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, slow = _runs(tmp_path)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "out"
    assert (
        main(
            [
                a,
                b,
                "--junit",
                str(out / "j.xml"),
                "--markdown",
                str(out / "g.md"),
                "--json",
                str(out / "g.json"),
            ]
        )
        == exit_codes.OK
    )
    assert "no regression" in capsys.readouterr().out
    assert ET.parse(out / "j.xml").getroot().find("testsuite") is not None
    assert json.load(open(out / "g.json"))["exit_code"] == 0
    assert main([a, slow, "--quiet"]) == exit_codes.GATE_REGRESSED
    assert "REGRESSED: median_tpot_ms" in capsys.readouterr().out
    text = summary.read_text()
    assert text.count("### ") == 2 and "no regression" in text and "REGRESSED" in text  # appended, twice


def test_baseline_file_is_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, slow = _runs(tmp_path)
    file = str(tmp_path / "ci" / "baseline.npz")
    assert main(["--save-baseline", file, a]) == exit_codes.OK
    from_dir = gate(load_side(a), load_side(slow), parse_rules(None), resamples=500)
    from_file = gate(load_side(file), load_side(slow), parse_rules(None), resamples=500)
    assert [r.to_dict() for r in from_file.results] == [r.to_dict() for r in from_dir.results]
    assert load_side(file).describe().startswith(f"{file} (from {a}, 1 run")
    save_baseline(file, load_side(file))  # a baseline file saved again keeps where it came from
    assert load_side(file).origin == a


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, _slow = _runs(tmp_path)
    other = str(tmp_path / "other")
    shutil.copytree(b, other)
    meta = json.load(open(os.path.join(other, "run_meta.json")))
    json.dump({**meta, "input_len": 512, "model_id": "n"}, open(os.path.join(other, "run_meta.json"), "w"))
    assert main([a, other]) == exit_codes.USAGE
    err = capsys.readouterr().err
    assert "differ in model_id ('m' vs 'n'), input_len (100 vs 512)" in err and "--allow-mismatch" in err
    assert main([a, other, "--allow-mismatch", "model_id", "input_len", "--quiet"]) == exit_codes.OK
    junk = tmp_path / "junk.npz"
    junk.write_text("not a baseline")
    for argv in (
        [a],
        [a, str(junk)],
        [a, str(tmp_path / "nowhere")],
        [a, b, "--max-regression", "x:y"],
        [a, b, "--allow-mismatch", "colour"],
        ["--save-baseline", str(junk), a, b],
        [a, str(tmp_path)],
    ):
        assert main(argv) == exit_codes.USAGE, argv
    assert capsys.readouterr().err.count("vllm-locust gate: error: ") == 7


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == exit_codes.OK
    out = capsys.readouterr().out
    assert "--save-baseline FILE RUN" in out and "p99_ttft_ms:10%" in out


def test_exit_code_is_documented() -> None:
    assert exit_codes.GATE_REGRESSED in exit_codes.DESCRIPTIONS
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"| {exit_codes.GATE_REGRESSED} | `vllm-locust gate`" in readme
    assert "docs/ci.md" in readme and (ROOT / "docs" / "ci.md").is_file()
