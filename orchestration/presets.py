"""`vllm-locust run --preset NAME`: defaults for the guide's scenes, checks of scenario inputs, the MoE sweep.

A preset is a layer of values (orchestration.config): above the table's defaults, below the config file, the
environment and the command line, so it only fills options the user did not give anywhere.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from vllm_users.client import stdlib_http
from vllm_users.errors import UsageError
from vllm_users.options import Options

SIM_DETAILS = "--enable-prompt-tokens-details"
SIM_MOE = "--num-experts 16 --topk 2 --router-skew 0.8"
DEFAULT_SWEEP = "1,2,4,8,16,32,64"

PRESETS: dict[str, dict[str, Any]] = {
    "latency": {"users": 1, "workers": 1, "num_prompts": 32, "input_len": 128, "output_len": 128,
                "ignore_eos": True, "range_ratio": 0.0},
    "throughput": {"request_rate": math.inf, "max_concurrency": 64, "num_prompts": 512, "input_len": 512,
                   "output_len": 256, "ignore_eos": True},
    "prefix-caching": {"scenario": "multi-turn", "prefix_len": 512, "cache_rate": 0.75, "num_prefixes": 4,
                       "num_turns": 4, "users": 8, "num_prompts": 128, "input_len": 64, "output_len": 64,
                       "sim_args": SIM_DETAILS},
    "moe": {"concurrency_sweep": DEFAULT_SWEEP, "input_len": 128, "output_len": 128, "ignore_eos": True,
            "sim_args": SIM_MOE},
    "short-long": {"input_len": 64, "output_len": 2048, "ignore_eos": True, "users": 8, "num_prompts": 32},
    "long-short": {"input_len": 4096, "output_len": 128, "ignore_eos": True, "users": 8, "num_prompts": 32},
}  # fmt: skip
DESCRIPTIONS = {
    "latency": "one request at a time, fixed lengths: the latency floor",
    "throughput": "all requests at once (rate inf) capped by --max-concurrency: peak throughput",
    "prefix-caching": "multi-turn conversations sharing system prompts: TTFT by turn, hit rate",
    "moe": "concurrency sweep 1..64: output tok/s scaling efficiency and expert load balance",
    "short-long": "64 prompt tokens -> 2048 generated (decode-bound)",
    "long-short": "4096-token document -> 128-token summary (prefill-bound)",
}
# a preset value is skipped when the user gave one of these (they would contradict each other)
_CONFLICTS = {
    "request_rate": ("users",),
    "max_concurrency": ("users",),
    "users": ("request_rate", "max_concurrency"),
    "concurrency_sweep": ("sweep",),
    "scenario": ("locustfile",),  # -f brings its own users: a preset's scenario is not added to them
}


def preset_layer(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The preset's values, less those the user `given` (in any layer) or that contradict them."""
    if name not in PRESETS:
        raise UsageError(f"--preset {name!r}: expected one of {', '.join(sorted(PRESETS))}")
    out = {}
    for dest, value in PRESETS[name].items():
        if dest in given or any(c in given for c in _CONFLICTS.get(dest, ())):
            continue
        if dest == "sim_args" and given.get("host"):
            continue  # a real server: its own flags
        out[dest] = value
    return out


def prepare(o: Options, scenario_names: list[str]) -> Options:
    """Scenario defaults and input checks before any load; a UsageError (DatasetError, SchemaError,
    TokenizerError) on bad input."""
    if "burst" in scenario_names and o.num_prompts is None and o.run_time is None:
        from vllm_users.scenarios.burst import plan_from_options

        o = dataclasses.replace(o, run_time=plan_from_options(o, o.users).total_s + 5)  # the shape ends the run
    if o.dataset:
        from vllm_users.workload.datasets import load_dataset

        load_dataset(o.dataset, o.dataset_format)
    if o.json_schema:
        from vllm_users.workload.schemas import load_schema_file

        load_schema_file(o.json_schema)
    if o.tokenizer:
        from vllm_users.workload.source import load_tokenizer

        load_tokenizer(o.tokenizer)
    return o


# ----- concurrency sweep (moe preset) -----
_EXPERT_RE = re.compile(r"^vllm:moe_expert_tokens_total\{([^}]*)\}\s+([0-9.eE+-]+)", re.M)


def expert_counters(host: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> dict[str, float] | None:
    """`vllm:moe_expert_tokens_total{expert}` from the server's /metrics (`headers`: the run's credentials); None
    when it has none."""
    import urllib.request

    req = urllib.request.Request(host.rstrip("/") + "/metrics", headers=headers or {})
    try:
        with stdlib_http.urlopen(req, timeout=timeout) as resp:  # interim 1xx skipped
            text = resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    out: dict[str, float] = {}
    for labels, value in _EXPERT_RE.findall(text):
        m = re.search(r'expert="([^"]*)"', labels)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(value)
    return out or None


def expert_balance(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """Per-expert token deltas of one step: max/mean and coefficient of variation (None without counters)."""
    if not after:
        return None
    delta = [after[k] - (before or {}).get(k, 0.0) for k in sorted(after, key=lambda x: (len(x), x))]
    n = len(delta)
    mean = sum(delta) / n
    if mean <= 0:
        return {"experts": n, "tokens": 0.0, "max_over_mean": None, "cv": None}
    std = math.sqrt(sum((d - mean) ** 2 for d in delta) / n)
    return {"experts": n, "tokens": sum(delta), "max_over_mean": max(delta) / mean, "cv": std / mean,
            "per_expert": delta}  # fmt: skip


# ----- expert balance from real vLLM -----
# vLLM exports no per-expert counter. With `--enable-return-routed-experts` (vLLM >= 0.26) a non-streamed
# completion carries `routed_experts`: base64 of a .npy array (tokens - 1, layers, topk) of expert ids, per token
# that went through the model; that is the router's real choice, on one GPU too. EPLB (`--enable-eplb`) logs its
# balancedness, but vLLM 0.26 refuses it without expert parallelism over TP x PCP x DP > 1 ranks.
EPLB_ONE_GPU = ("vLLM 0.26 refuses --enable-eplb on one GPU: EPLB needs --enable-expert-parallel over "
                "TP x PCP x DP > 1 ranks (vllm/config/parallel.py); its balancedness exists from 2 GPUs on")  # fmt: skip
NO_ROUTING = ("the server returned no routed_experts: start vLLM with --enable-return-routed-experts "
              "(a MoE model, non-streamed requests) for the real router's expert balance")  # fmt: skip
_NPY_CODES = {"u1": "B", "i1": "b", "u2": "H", "i2": "h", "u4": "I", "i4": "i", "u8": "Q", "i8": "q"}
_EPLB_RE = re.compile(r"EPLB step: (\d+) for model (\S+): avg_tokens=([0-9.]+), max_tokens=(\d+), "
                      r"balancedness=([0-9.]+)")  # fmt: skip


def decode_npy(raw: bytes) -> tuple[tuple[int, ...], list[int]]:
    """An integer C-order .npy array (numpy's file format, read without numpy) -> (shape, flat values)."""
    import array
    import ast
    import struct
    import sys

    if raw[:6] != b"\x93NUMPY" or len(raw) < 10:
        raise ValueError("not a .npy array")
    hlen, start = (struct.unpack("<H", raw[8:10])[0], 10) if raw[6] == 1 else (struct.unpack("<I", raw[8:12])[0], 12)  # fmt: skip
    header = ast.literal_eval(raw[start : start + hlen].decode("latin1"))
    descr, shape = str(header.get("descr", "")), tuple(int(x) for x in header.get("shape", ()))
    code = _NPY_CODES.get(descr[1:])
    if code is None or header.get("fortran_order"):
        raise ValueError(f".npy array of {descr!r} (fortran order {header.get('fortran_order')}): expected ints")
    values = array.array(code)
    values.frombytes(raw[start + hlen :])
    if values.itemsize > 1 and descr[0] in "<>" and (descr[0] == "<") != (sys.byteorder == "little"):
        values.byteswap()
    if len(values) != math.prod(shape):
        raise ValueError(f".npy array: {len(values)} values for shape {shape}")
    return shape, values.tolist()


def routed_expert_counts(
    host: str,
    model: str,
    experts: int,
    requests: int = 16,
    prompt_words: int = 96,
    max_tokens: int = 64,
    seed: int = 0,
    timeout: float = 120.0,
) -> dict[str, Any] | None:
    """Tokens the router sent to each expert, per layer, over `requests` non-streamed /v1/completions of random
    words; None when the server returns no routed_experts (not vLLM, flag off, not MoE)."""
    import base64
    import json
    import random
    import urllib.request

    from vllm_users.workload.prompts import random_words

    rng = random.Random(seed)
    per_layer: list[list[int]] = []
    positions = 0
    topk = None
    for _ in range(requests):
        body = {"model": model, "prompt": random_words(prompt_words, rng), "max_tokens": max_tokens,
                "ignore_eos": True, "temperature": 0.0, "stream": False}  # fmt: skip
        req = urllib.request.Request(host.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        with stdlib_http.urlopen(req, timeout=timeout) as resp:
            doc = json.loads(resp.read())
        b64 = (doc.get("choices") or [{}])[0].get("routed_experts")
        if not b64:
            return None
        shape, ids = decode_npy(base64.b64decode(b64))
        if len(shape) != 3:
            raise ValueError(f"routed_experts of shape {shape}: expected (tokens, layers, topk)")
        n_tok, n_layers, topk = shape
        per_layer = per_layer or [[0] * experts for _ in range(n_layers)]
        for t in range(n_tok):
            for layer in range(n_layers):
                for e in ids[(t * n_layers + layer) * topk : (t * n_layers + layer + 1) * topk]:
                    if not 0 <= e < experts:
                        raise ValueError(f"routed_experts: expert id {e} outside 0..{experts - 1}")
                    per_layer[layer][e] += 1
        positions += n_tok
    return {"source": "routed_experts", "requests": requests, "token_positions": positions, "topk": topk,
            "layers": len(per_layer), "per_layer": per_layer}  # fmt: skip


def routing_balance(per_layer: list[list[int]], ranks: tuple[int, ...] = (2, 4, 8)) -> dict[str, Any]:
    """Balance of per-layer expert loads: expert_balance's max/mean and CV of the totals over layers, the mean over
    layers of each layer's max/mean, and per N in `ranks` the balancedness EPLB would log with the experts laid
    out in order over N GPUs before any rearrangement (sum over layers of mean rank load / max rank load)."""
    experts = len(per_layer[0]) if per_layer else 0
    totals = {str(e): float(sum(layer[e] for layer in per_layer)) for e in range(experts)}
    out = expert_balance(None, totals) or {"experts": 0, "tokens": 0.0, "max_over_mean": None, "cv": None}
    layer_mm = [max(layer) * len(layer) / sum(layer) for layer in per_layer if sum(layer) > 0]
    out["layer_max_over_mean"] = sum(layer_mm) / len(layer_mm) if layer_mm else None
    eplb: dict[str, float | None] = {}
    for n in ranks:
        if experts % n or n > experts:
            continue
        per = experts // n  # vLLM's default layout: physical expert e on rank e // per
        loads = [[sum(layer[r * per : (r + 1) * per]) for r in range(n)] for layer in per_layer]
        top = sum(max(x) for x in loads)
        eplb[str(n)] = sum(sum(x) / n for x in loads) / top if top else None
    out["eplb_balancedness_if_spread"] = eplb
    return out


def eplb_log_lines(text: str) -> list[dict[str, Any]]:
    """vLLM's `EPLB step: ... balancedness=...` log lines (`--eplb-config '{"log_balancedness": true}'`)."""
    return [{"step": int(s), "model": m, "avg_tokens": float(a), "max_tokens": int(x), "balancedness": float(b)}
            for s, m, a, x, b in _EPLB_RE.findall(text)]  # fmt: skip
