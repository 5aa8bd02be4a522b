"""Calibrate against the simulator itself: a simulator started with known, non-default constants is "the real
server" (its decode step slows with the context: --decode-per-ctx-token-us; its prefill with the tokens before
each one: --prefill-per-ctx-token-ns); the fit must recover its constants
within the fit's own stated uncertainty, the twin must predict three
loads the probe never sent, and the probe must keep its budget and write what it has on Ctrl-C."""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestration.twin.check import Load, compare, run_load
from vllm_sim.launch import SimProcess, start_simulator

pytestmark = pytest.mark.timeout(400)

TRUE = {
    "prefill_tokens_per_s": 5000.0,
    "prefill_per_ctx_token_ns": 30.0,
    "decode_step_ms": 20.0,
    "decode_per_seq_ms": 1.0,
    "decode_per_ctx_token_us": 4.0,
    "request_overhead_ms": 10.0,
    "max_num_seqs": 12,
    "kv_cache_tokens": 20000,
    "max_model_len": 6000,
    "max_num_batched_tokens": 2048,
}
# the token budget is vLLM for CPU's (not the simulator's default 8192): the probe's bursts must find it
REAL_ARGS = [a for k, v in TRUE.items() for a in (f"--{k.replace('_', '-')}", str(v))]
# the fit's probe budget: it repeats its phases while under half of it is spent. Not less: at 90 s (one pass on a
# busy machine, one burst) prefill_per_ctx_token_ns came out 54 ± 33 against 30, an uncertainty over half the value
FIT_BUDGET_S = 120
# loads the probe did not send: a closed-loop concurrency (with prefills inside decode steps), an open-loop rate,
# and a prompt longer than any of the probe's
LOADS = [
    Load("closed-6", 40, 200, 40, concurrency=6, output_spread=0.5),
    Load("poisson-4/s", 40, 100, 30, rate=4.0),
    Load("long-prompt", 3, 3000, 8),
]


def calibrate(host: str, out: Path, budget: str, **kw: Any) -> subprocess.Popen[str]:
    """Start `vllm-locust calibrate` as a user would."""
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "calibrate",
        "--host",
        host,
        "--budget",
        budget,
        "-o",
        str(out),
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
        **kw,
    )


def _ctrl_c_as_at_a_terminal() -> None:
    """SIGINT raises KeyboardInterrupt in the child, as in a terminal's foreground job: where pytest itself was
    started with SIGINT ignored (`pytest &` from a script, some CI runners) the child inherits SIG_IGN, Python
    then installs no handler, and calibrate ran to its end and exited 0 after the test's SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_line(proc: subprocess.Popen[str], text: str, timeout: float) -> str:
    """Read `proc`'s stderr until a line contains `text` (AssertionError after `timeout` s or at its end); what
    was read."""
    assert proc.stderr is not None
    fd, got = proc.stderr.fileno(), b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while text.encode() not in got:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} within {timeout} s: {got.decode(errors='replace')[-2000:]}"
            if sel.select(left):
                chunk = os.read(fd, 65536)
                assert chunk, f"stderr closed before {text!r}: {got.decode(errors='replace')[-2000:]}"
                got += chunk
    return got.decode(errors="replace")


@pytest.fixture(scope="module")
def real() -> Iterator[SimProcess]:
    with start_simulator(REAL_ARGS) as sim:
        yield sim


def emitted_late(url: str) -> tuple[float, int]:
    """The simulator's own lateness so far (/sim/stats): seconds its emissions came after their planned time, in
    all, and how many."""
    late = json.loads(urllib.request.urlopen(url + "/sim/stats", timeout=10).read())["lateness_s"]
    return float(late["mean"]) * int(late["count"]), int(late["count"])


@pytest.fixture(scope="module")
def twin(real: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("twin") / "twin.json"
    t0 = time.monotonic()
    before = emitted_late(real.url)
    proc = calibrate(real.url, out, f"{FIT_BUDGET_S}s")
    stdout, stderr = proc.communicate(timeout=200)
    assert proc.returncode == 0, stderr
    after = emitted_late(real.url)
    doc: dict[str, Any] = json.loads(out.read_text())
    doc["_wall_s"] = time.monotonic() - t0
    doc["_late_ms"] = 1000.0 * (after[0] - before[0]) / max(1, after[1] - before[1])
    doc["_path"] = str(out)
    doc["_stdout"] = stdout
    return doc


@pytest.mark.exclusive  # the simulated server slows under other jobs' load: its constants are the truth
def test_the_fit_recovers_the_constants_within_its_uncertainty(twin: dict[str, Any]) -> None:
    """~80 s alone on the machine: the calibration itself (FIT_BUDGET_S, the `twin` fixture) against a simulator
    of known constants; a smaller budget left prefill_per_ctx_token_ns unresolved."""
    print(twin["_stdout"])  # the fit table (docs/twin.md shows one)
    c = twin["constants"]
    late = late_allowance(twin["_late_ms"])
    print(f"the simulator's emissions came {twin['_late_ms']:.2f} ms late on average: allowed {late}")
    misses = off_the_truth(c, TRUE, late)
    assert not misses, f"{misses}; {twin['_stdout']}"
    # a simulator so late that its own flags say little of what it did: a failure, not a bound that grows with it
    assert all(v < 0.5 * TRUE[k] for k, v in late.items()), late
    # and the uncertainties say something: well below the values (the overhead: below the smallest TTFT it is in)
    for name in (
        "prefill_tokens_per_s",
        "prefill_per_ctx_token_ns",
        "decode_step_ms",
        "decode_per_seq_ms",
        "decode_per_ctx_token_us",
        "kv_cache_tokens",
    ):
        assert c[name]["uncertainty"] < 0.5 * TRUE[name], name
    assert c["request_overhead_ms"]["uncertainty"] < 0.5 * min(p["ttft_ms"] for p in twin["points"]["ttft"])
    assert c["max_num_seqs"]["value"] == TRUE["max_num_seqs"] and c["max_num_seqs"]["source"] == "measured"
    assert c["max_model_len"]["value"] == TRUE["max_model_len"]
    budget = c["max_num_batched_tokens"]
    assert (budget["value"], budget["source"]) == (TRUE["max_num_batched_tokens"], "burst"), budget
    assert c["enable_prefix_caching"]["value"] is True
    assert "TTFT points" in twin["_stdout"] and "prefill_tokens_per_s" in twin["_stdout"]
    assert twin["probe"]["partial"] is False and twin["_wall_s"] < FIT_BUDGET_S + 15


FITTED = (
    "prefill_tokens_per_s",
    "prefill_per_ctx_token_ns",
    "decode_step_ms",
    "decode_per_seq_ms",
    "decode_per_ctx_token_us",
    "request_overhead_ms",
    "kv_cache_tokens",
)


def late_allowance(late_ms: float) -> dict[str, float]:
    """What the simulator's own measured lateness (`late_ms`, its mean over the calibration) moves each constant
    by, from its step model: a step's end comes late_ms late and the next step starts from there (the decode step),
    the first token has its own emission and the request's overhead timer before it (the overhead, twice), and a
    burst's full prefill steps of max_num_batched_tokens each take late_ms more (the prefill rate). Where the
    simulator keeps its schedule late_ms is near 0 and the fit's own uncertainty is the bound; on a busy machine
    the simulator itself ran slower than its flags (its emissions 3-8 ms late on a 2-core box at load 8; a decode
    step fitted at 24.1 ± 2.1 ms against a flag of 20 with them 3.1 ms late), and what it did is the truth."""
    rate, budget = TRUE["prefill_tokens_per_s"], TRUE["max_num_batched_tokens"]
    step_s = budget / rate
    return {
        "decode_step_ms": late_ms,
        "request_overhead_ms": 2.0 * late_ms,
        "prefill_tokens_per_s": rate * (late_ms / 1e3) / (step_s + late_ms / 1e3),
    }


def off_the_truth(c: dict[str, Any], true: dict[str, Any], late: dict[str, float]) -> list[str]:
    """The fitted constants further from `true` than their own uncertainty plus what the simulator's measured
    lateness moved them by (`late`), or from a source they should not come from."""
    misses = []
    for name in FITTED:
        # the prefill rate from the batch bursts where they know it better than the concurrency-1 line
        if c[name]["source"] not in (("fit", "burst") if name == "prefill_tokens_per_s" else ("fit",)):
            misses.append(f"{name}: from {c[name]['source']}")
            continue
        err = abs(c[name]["value"] - true[name])
        if not err <= c[name]["uncertainty"] + late.get(name, 0.0):
            misses.append(
                f"{name}: {c[name]['value']:.4g} ± {c[name]['uncertainty']:.3g} vs true {true[name]}"
            )
    return misses


def _tolerance(twin: dict[str, Any]) -> float:
    """From the probe's own noise: 3× the larger mean |error| of its points against the fit, plus 5 % for the
    load that other processes put on this machine between the two runs."""
    noise = max(twin["fit"]["ttft"]["mean_abs_error_pct"], twin["fit"]["tpot"]["mean_abs_error_pct"]) / 100.0
    return 3.0 * noise + 0.05


def _judge_load(real: SimProcess, twin_url: str, load: Load, tol: float) -> tuple[list[str], tuple[Any, ...]]:
    """One load to the server twice (the second seeded anew: other prompts, lengths, arrivals) and to the twin
    once: the misses beyond the tolerance plus the server's own spread, and the row printed."""
    r1, t = run_load(real.url, "sim-model", load), run_load(twin_url, "sim-model", load)
    r2 = run_load(real.url, "sim-model", dataclasses.replace(load, seed=load.seed + 1000))
    assert r1["failed"] == 0 and r2["failed"] == 0 and t["failed"] == 0, (r1, r2, t)
    r = {k: (r1[k] + r2[k]) / 2 for k in ("ttft_ms_median", "tpot_ms_median", "output_tok_s")}
    drift = {k: abs(v) for k, v in compare(r1, r2).items() if v is not None}
    e = compare(r, t)
    misses = [
        f"{load.name} {k}: twin off by {v:+.1%} (tolerance {tol + drift.get(k, 0.0):.1%})"
        for k, v in e.items()
        if v is None or abs(v) > tol + drift.get(k, 0.0)
    ]
    row = (
        load.name,
        r1,
        r2,
        t,
        {k: f"{v:+.1%}" for k, v in e.items() if v is not None},
        {k: f"{v:.1%}" for k, v in drift.items()},
    )
    return misses, row


def test_the_twin_predicts_loads_the_probe_did_not_use(real: SimProcess, twin: dict[str, Any]) -> None:
    """Each load goes to the server twice and to the twin once; the spread of the server's own two runs joins
    the tolerance (a closed loop's median TTFT moved 100 -> 119 ms between two runs of the same simulator on this
    machine). A load that misses is sent once more, and the twin fails when it misses both times: on the busy
    2-core box another job's burst once put a Poisson load's median TTFT 24 % off in one round (the server's own
    two runs 21 % apart in throughput), while a wrong constant misses every round
    (test_a_wrong_constant_is_caught_by_the_same_comparison). ~2.5 min, mostly waiting: the module's calibration
    (its `twin` fixture, ~80 s) and three loads sent three times."""
    tol = _tolerance(twin)
    print(f"tolerance {tol:.1%} + the server's own spread per load")
    failed: list[str] = []
    with start_simulator(["--twin", twin["_path"]]) as tw:
        for load in LOADS:
            misses, row = _judge_load(real, tw.url, load, tol)
            print(*row)
            if misses:
                print("again:", misses)
                misses, row = _judge_load(real, tw.url, load, tol)
                print(*row)
            failed += misses
    assert not failed, failed


def test_a_wrong_constant_is_caught_by_the_same_comparison(real: SimProcess, twin: dict[str, Any]) -> None:
    """The comparison can fail: a twin with half the prefill speed is outside the tolerance on the long prompt."""
    tol = _tolerance(twin)
    with start_simulator(["--twin", twin["_path"], "--prefill-tokens-per-s", "2500"]) as tw:
        misses, row = _judge_load(real, tw.url, LOADS[2], tol)
    assert any(m.startswith("long-prompt ttft_ms_median") for m in misses), (misses, row)


def test_the_budget_is_a_hard_bound(real: SimProcess, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    t0 = time.monotonic()
    proc = calibrate(real.url, out, "10s")
    _, stderr = proc.communicate(timeout=60)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, stderr
    doc = json.loads(out.read_text())
    assert doc["probe"]["partial"] is True and doc["probe"]["stopped"] == "budget spent"
    assert doc["probe"]["elapsed_s"] <= 10 + 2.0 and wall < 10 + 10  # the interpreter's start is outside


def test_ctrl_c_writes_what_was_measured(real: SimProcess, twin: dict[str, Any], tmp_path: Path) -> None:
    """Also a second calibration of the same server: its prompts are its own (a new seed), so none of its long
    prompts is answered from the prefix cache the first one filled (with one seed, 1,400 tokens came back in
    121 ms on vLLM for CPU, where a fresh one took ~950 ms)."""
    out = tmp_path / "c.json"
    proc = calibrate(real.url, out, "120s")
    try:
        before = wait_for_line(proc, " ttft done in ", timeout=90)  # past the TTFT phase
    except BaseException:
        proc.kill()
        raise
    proc.send_signal(signal.SIGINT)
    # it stops within a second or two; a bound, not a wait (the run that "took over 60 s to stop" on a busy box had
    # SIGINT ignored, inherited from its parent: it probed to its end and exited 0; see _ctrl_c_as_at_a_terminal)
    stdout, stderr = proc.communicate(timeout=150)
    stderr = before + stderr
    assert proc.returncode == 130, stderr
    doc = json.loads(out.read_text())
    assert doc["probe"]["partial"] is True and doc["probe"]["stopped"] == "interrupted"
    assert doc["points"]["ttft"], "the points measured before Ctrl-C are in the file"
    assert doc["probe"]["seed"] != twin["probe"]["seed"]
    long = [p["ttft_ms"] for p in doc["points"]["ttft"] if p["prompt_tokens"] >= 1000]
    assert long and min(long) > 1000 * 1000 / TRUE["prefill_tokens_per_s"], long  # a lower bound: never flaky


def test_a_server_that_fails_the_probe_is_exit_3(tmp_path: Path) -> None:
    with start_simulator(["--fault-rate-500", "1"]) as bad:
        proc = calibrate(bad.url, tmp_path / "x.json", "20s")
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert len(stderr.strip().splitlines()) == 1 and "error" in stderr
    assert not (tmp_path / "x.json").exists()
