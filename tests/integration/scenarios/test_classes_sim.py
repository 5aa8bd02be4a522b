"""Traffic classes against the simulator: the mix by weight, models and priorities per request,
per-class results that agree with the records, priority scheduling under overload, preflight of adapter names."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from vllm_users.exit_codes import PREFLIGHT

from .runner import succeeded, vllm_locust

SMALL = ["--input-len", "16", "--output-len", "8"]
LORA = "--lora-modules lora-a,lora-b --slow-adapter lora-b:2 --scheduling-policy priority"


def test_two_classes_with_models_and_a_mix(tmp_path) -> None:
    n = 200
    r = vllm_locust(
        tmp_path,
        "--num-prompts",
        str(n),
        "--users",
        "8",
        *SMALL,
        "--class",
        "chat:weight=3,priority=0,ttft=2000,model=lora-a",
        "--class",
        "batch:weight=1,priority=5,e2el=60000",
        "--model",
        "sim-model:1,lora-b:1",
        "--sim-args",
        LORA,
    )
    assert succeeded(r), r.err
    recs = r.records()
    by = Counter((x["request_class"], x["model"]) for x in recs)
    n_chat = sum(v for (c, _), v in by.items() if c == "chat")
    assert abs(n_chat - 0.75 * n) <= 5 * math.sqrt(n * 0.75 * 0.25), by  # binomial, 5 sigma
    assert {m for (c, m) in by if c == "chat"} == {"lora-a"}  # the class's model
    assert {m for (c, m) in by if c == "batch"} == {None, "lora-b"}  # the mix (None: the run's base model)
    cls = r.result["classes"]
    pc = cls["per_class"]
    assert pc["chat"]["completed"] == n_chat and pc["batch"]["completed"] == n - n_chat
    assert pc["chat"]["priority"] == 0 and pc["chat"]["slo_ms"] == {"ttft": 2000.0}
    assert sum(c["request_share"] for c in pc.values()) == pytest.approx(1.0)
    x = [pc[k]["request_goodput"] / w for k, w in (("chat", 3), ("batch", 1))]
    assert cls["fairness"]["jain_index"] == pytest.approx(sum(x) ** 2 / (2 * sum(v * v for v in x)))
    assert "Per class" in r.out and "Fairness (Jain" in r.out
    assert r.result["meta"]["classes"][0]["name"] == "chat"
    # per model: the mix's names, then the classes' adapter; each counted as the records say
    pm = r.result["per_model"]
    assert list(pm) == ["sim-model", "lora-b", "lora-a"]
    seen = Counter(x["model"] or "sim-model" for x in recs)
    assert {k: v["completed"] for k, v in pm.items()} == dict(seen)


def test_priority_class_waits_less_under_overload(tmp_path) -> None:
    sim = "--max-num-seqs 2 --decode-step-ms 5 --decode-per-seq-ms 0 --scheduling-policy priority"
    r = vllm_locust(
        tmp_path,
        "--num-prompts",
        "160",
        "--users",
        "24",
        "--input-len",
        "16",
        "--output-len",
        "16",
        "--ignore-eos",
        "--class",
        "hi:weight=1,priority=0",
        "--class",
        "lo:weight=1,priority=10",
        "--sim-args",
        sim,
    )
    assert succeeded(r), r.err
    ttft = {c: [x["chunk_times_us"][0] for x in r.records() if x["request_class"] == c] for c in ("hi", "lo")}
    assert min(len(v) for v in ttft.values()) > 30
    pc = r.result["classes"]["per_class"]
    assert pc["hi"]["p99_ttft_ms"] < pc["lo"]["p99_ttft_ms"]
    assert "per_model" not in r.result and "Per model" not in r.out  # one model: no block, no section
    assert np.median(ttft["hi"]) < np.median(ttft["lo"])


def test_config_file_classes_and_missing_adapter(tmp_path) -> None:
    cfg = tmp_path / "classes.yaml"
    cfg.write_text("classes:\n  - {name: a, weight: 1, model: nope}\n  - {name: b, weight: 1}\n")
    r = vllm_locust(tmp_path, "--config", str(cfg), "--num-prompts", "4", *SMALL, name="missing")
    assert r.rc == PREFLIGHT and "'nope' is not served" in r.err and len(r.err.strip().splitlines()) == 1


def test_classes_by_scenario_and_valid_in_goodput(tmp_path) -> None:
    r = vllm_locust(
        tmp_path,
        "--scenario",
        "chat:1,json:1",
        "--num-prompts",
        "40",
        "--users",
        "4",
        *SMALL,
        "--class",
        "talk:scenario=chat,ttft=5000",
        "--class",
        "extract:scenario=json,e2el=60000",
        "--goodput",
        "ttft:5000",
        "valid",
    )
    assert succeeded(r), r.err
    recs = r.records()
    assert {(x["scenario"], x["request_class"]) for x in recs} == {("chat", "talk"), ("json", "extract")}
    g = r.result["goodput"]
    assert g["requires_valid"] is True and g["invalid"] == 0 and g["good"] == g["good_latency_only"] == 40
    assert r.result["classes"]["per_class"]["extract"]["invalid"] == 0
    bad = vllm_locust(tmp_path, "--class", "x:scenario=json", "--num-prompts", "4", name="bad")
    assert bad.rc == 2 and "scenario=json is not run" in bad.err


def test_a_slow_adapter_shows_in_the_per_model_figures(tmp_path) -> None:
    """A mix of the base and two adapters, one decoding 4x slower, and no --class: result.json's per_model and
    the summary show the slow one, by about its factor (a ratio of two models of one run, not a timing)."""
    n = 120
    r = vllm_locust(
        tmp_path,
        "--num-prompts",
        str(n),
        "--users",
        "8",
        "--input-len",
        "16",
        "--output-len",
        "16",
        "--ignore-eos",
        "--model",
        "sim-model:2,lora-a:1,lora-b:1",
        "--goodput",
        "tpot:25",
        "--sim-args",
        "--lora-modules lora-a,lora-b --slow-adapter lora-b:4",
    )
    assert succeeded(r), r.err
    pm = r.result["per_model"]
    assert list(pm) == ["sim-model", "lora-a", "lora-b"]
    seen = Counter(x["model"] or "sim-model" for x in r.records())
    assert {k: v["completed"] for k, v in pm.items()} == dict(seen) and sum(seen.values()) == n
    base, fast, slow = pm["sim-model"], pm["lora-a"], pm["lora-b"]
    for m in ("tpot", "itl"):
        assert 2.5 < slow[f"median_{m}_ms"] / base[f"median_{m}_ms"] < 6.5, (m, slow, base)
        assert 0.5 < fast[f"median_{m}_ms"] / base[f"median_{m}_ms"] < 2.0, (m, fast, base)
    assert slow["p99_e2el_ms"] > 2 * base["median_e2el_ms"]
    dur = r.result["duration"]
    for m in pm.values():  # goodput against the run's SLO, per model
        assert m["slo_ms"] == {"tpot": 25.0} and m["request_goodput"] == pytest.approx(m["good"] / dur)
    assert slow["good_fraction"] <= base["good_fraction"]
    assert sum(m["good"] for m in pm.values()) == r.result["goodput"]["good"]
    assert "Per model" in r.out and any(line.startswith("lora-b ") for line in r.out.splitlines())
