"""The twin against real vLLM for CPU (tiny model): calibrate with a small budget, then send three loads the probe
did not use (a closed-loop concurrency, an open-loop rate, a prompt longer than the probe's longest, which the
2048-token context caps near 1400) to vLLM and to the twin; median TTFT, median TPOT and output tok/s must agree
within a tolerance derived from the probe's own noise plus the server's own drift between two runs of the load and
since the fit (its one-stream TPOT now against the probe's), and for TPOT the twin's own stated uncertainty on it,
from its fitted decode constants.
The figures are printed (docs/twin.md has them, with the command)."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestration.twin.check import Load, compare, run_load
from tests.e2e.vllm_env import VllmServer, client_preexec
from vllm_sim.launch import start_simulator

ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 120
LOADS = [
    Load("closed-4", 30, 128, 32, concurrency=4, output_spread=0.5),
    Load("poisson-1/s", 10, 64, 24, rate=1.0),
    Load("long-prompt", 3, 1700, 8),
]


SPEED = Load(
    "one-stream", 4, 32, 24
)  # a decode step alone: vLLM's speed now, against the probe's batch-1 points


def _moved_since_the_fit(doc: dict[str, Any], server: VllmServer, tokens_per_word: float) -> float:
    """How far vLLM's speed has moved since the probe measured it (relative): its TPOT of one stream now against
    the probe's own batch-1 TPOT points (short prompts). The twin reproduces the server it measured; on this
    2-core machine vLLM for CPU once decoded at 4.2-7.9 ms a token all through a calibration and at 2.6 ms in the
    loads a minute later (the twin +106 %), with its two runs of each load 2 % apart."""
    pts = [p["tpot_ms"] for p in doc["points"]["tpot"] if p["batch"] == 1 and p["prompt_tokens"] <= 64]
    now = run_load(server.url, server.model_name, SPEED, timeout_s=60, tokens_per_word=tokens_per_word)
    if not pts or not now.get("tpot_ms_median"):
        return 0.0
    return abs(now["tpot_ms_median"] / statistics.median(pts) - 1.0)


def _tolerance(doc: dict[str, Any]) -> float:
    """3× the larger mean |error| of the probe's points against its fit, plus 5 % for run-to-run drift."""
    noise = max(doc["fit"]["ttft"]["mean_abs_error_pct"], doc["fit"]["tpot"]["mean_abs_error_pct"]) / 100.0
    return 3.0 * noise + 0.05


def _tpot_uncertainty(doc: dict[str, Any], load: Load) -> float:
    """The twin's own stated uncertainty on a stream's TPOT under `load`, relative to that TPOT: the fitted decode
    constants' uncertainties carried through step + per_seq × streams + per_ctx × context. On a fast CPU the
    probe's decode step is a few ms and its context term can come out unresolved (0.62 ± 0.71 µs/token): the
    1,400-token load's TPOT then rests on a term the fit itself says it does not know (+76 % there once, where
    the probe's noise allowed 73 %)."""
    c = doc["constants"]
    step, seq, per_ctx = c["decode_step_ms"], c["decode_per_seq_ms"], c["decode_per_ctx_token_us"]
    # the server caps the prompt so that prompt + output fit its context; the mean context over the decode
    ctx = min(load.prompt_tokens, c["max_model_len"]["value"] - load.output_tokens) + load.output_tokens / 2
    n = load.concurrency
    tpot = step["value"] + n * seq["value"] + ctx * per_ctx["value"] / 1000.0
    u = math.hypot(step["uncertainty"], n * seq["uncertainty"], ctx * per_ctx["uncertainty"] / 1000.0)
    return u / tpot if tpot > 0 else 0.0


# alone on the machine: the probe fits vLLM's speed at one moment and the loads measure it minutes later; with
# other test processes beside it that speed moved by 2x between the two (+132 % on one load's TPOT)
@pytest.mark.exclusive
@pytest.mark.timeout(1200)
def test_the_twin_predicts_vllm_for_cpu(vllm_server: VllmServer, tmp_path: Path) -> None:
    """~1.5 min alone on the machine: a 120-s calibration budget (the probe stops repeating its phases at half of
    it), then three loads sent twice to vLLM and once to the twin."""
    out = tmp_path / "twin.json"
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "calibrate",
        "--host",
        vllm_server.url,
        "--model",
        vllm_server.model_name,
        "--budget",
        f"{BUDGET_S}s",
        "--max-concurrency",
        "8",
        "--saturation-requests",
        "32",
        "-o",
        str(out),
    ]
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=BUDGET_S + 120, cwd=ROOT, preexec_fn=client_preexec()
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    print(p.stdout)
    doc = json.loads(out.read_text())
    assert doc["probe"]["elapsed_s"] <= BUDGET_S + 5
    assert doc["constants"]["max_model_len"]["source"] == "server"
    assert doc["constants"]["prefill_tokens_per_s"]["source"] in (
        "fit",
        "burst",
    )  # burst: the batch phase knew it better
    assert doc["constants"]["decode_step_ms"]["source"] == "fit"
    # decode time grows with the context on this server (attention over the KV cache): the probe measures it, in
    # its context phase or, where that phase cannot resolve it on a busy box, from the batch bursts' decode
    ctx = doc["constants"]["decode_per_ctx_token_us"]
    assert ctx["source"] in ("fit", "burst") and ctx["value"] > 0, ctx
    # vLLM for CPU steps 2,048 tokens at most (its default), not the GPU's 8,192: the bursts' staircase shows it
    # (within a factor 2: neighbouring budgets differ less than a busy machine's noise can hide)
    budget = doc["constants"]["max_num_batched_tokens"]
    assert budget["source"] == "burst" and budget["value"] in (1024, 2048, 4096), budget
    tpw = doc["points"]["tokens_per_word"] or 1.0
    tol = _tolerance(doc)
    moved = _moved_since_the_fit(doc, vllm_server, tpw)
    rows = []
    with start_simulator(["--twin", str(out)]) as twin:
        for load in LOADS:
            # vLLM before and after the twin: its own drift between two runs of one load joins the tolerance (on a
            # shared machine the server's speed moves by more than the probe's noise says)
            real1 = run_load(
                vllm_server.url, vllm_server.model_name, load, timeout_s=300, tokens_per_word=tpw
            )
            tw = run_load(twin.url, vllm_server.model_name, load, timeout_s=300)
            again = dataclasses.replace(
                load, seed=load.seed + 1000
            )  # new prompts: no prefix-cache hit on vLLM
            real2 = run_load(
                vllm_server.url, vllm_server.model_name, again, timeout_s=300, tokens_per_word=tpw
            )
            assert real1["failed"] == 0 and real2["failed"] == 0 and tw["failed"] == 0, (real1, real2, tw)
            real = {
                k: (real1[k] + real2[k]) / 2 for k in ("ttft_ms_median", "tpot_ms_median", "output_tok_s")
            }
            drift = {k: abs(v) + moved for k, v in compare(real1, real2).items() if v is not None}
            stated = {"tpot_ms_median": _tpot_uncertainty(doc, load)}
            rows.append((load.name, real1, real2, tw, compare(real, tw), drift, stated))
    print(
        f"tolerance {tol:.1%} + the server's own drift per load and {moved:.1%} since the fit "
        "(TPOT: + the twin's stated uncertainty)"
    )
    for name, r1, r2, tw, e, drift, stated in rows:
        print(
            json.dumps(
                {
                    "load": name,
                    "vllm": r1,
                    "vllm_again": r2,
                    "twin": tw,
                    "error": e,
                    "drift": drift,
                    "twin_uncertainty": stated,
                }
            )
        )
    bad = [
        f"{name} {k} {v:+.1%} (tolerance {tol + drift.get(k, 0.0) + stated.get(k, 0.0):.1%})"
        for name, _r1, _r2, _t, e, drift, stated in rows
        for k, v in e.items()
        if v is None or abs(v) > tol + drift.get(k, 0.0) + stated.get(k, 0.0)
    ]
    assert not bad, f"the twin is off by more than the tolerance: {bad}"
