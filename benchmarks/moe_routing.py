"""Expert balance from real vLLM, for benchmarks/bench_gpu_moe.py: the router's own choices (`routed_experts`,
a base64 .npy array decoded here without numpy), their per-layer balance and EPLB's, and EPLB's log lines.

vLLM exports no per-expert counter. With `--enable-return-routed-experts` (vLLM >= 0.26) a non-streamed
completion carries `routed_experts`: base64 of a .npy array (tokens - 1, layers, topk) of expert ids, per token
that went through the model; that is the router's real choice, on one GPU too. EPLB (`--enable-eplb`) logs its
balancedness, but vLLM 0.26 refuses it without expert parallelism over TP x PCP x DP > 1 ranks.
"""

from __future__ import annotations

import math
import re
from typing import Any

from orchestration.server.moe_experts import expert_balance
from vllm_users.client import stdlib_http

EPLB_ONE_GPU = (
    "vLLM 0.26 refuses --enable-eplb on one GPU: EPLB needs --enable-expert-parallel over "
    "TP x PCP x DP > 1 ranks (vllm/config/parallel.py); its balancedness exists from 2 GPUs on"
)
NO_ROUTING = (
    "the server returned no routed_experts: start vLLM with --enable-return-routed-experts "
    "(a MoE model, non-streamed requests) for the real router's expert balance"
)
_NPY_CODES = {"u1": "B", "i1": "b", "u2": "H", "i2": "h", "u4": "I", "i4": "i", "u8": "Q", "i8": "q"}
_EPLB_RE = re.compile(
    r"EPLB step: (\d+) for model (\S+): avg_tokens=([0-9.]+), max_tokens=(\d+), "
    r"balancedness=([0-9.]+)"
)


def decode_npy(raw: bytes) -> tuple[tuple[int, ...], list[int]]:
    """An integer C-order .npy array (numpy's file format, read without numpy) -> (shape, flat values)."""
    import array
    import ast
    import struct
    import sys

    if raw[:6] != b"\x93NUMPY" or len(raw) < 10:
        raise ValueError("not a .npy array")
    hlen, start = (
        (struct.unpack("<H", raw[8:10])[0], 10) if raw[6] == 1 else (struct.unpack("<I", raw[8:12])[0], 12)
    )
    header = ast.literal_eval(raw[start : start + hlen].decode("latin1"))
    descr, shape = str(header.get("descr", "")), tuple(int(x) for x in header.get("shape", ()))
    code = _NPY_CODES.get(descr[1:])
    if code is None or header.get("fortran_order"):
        raise ValueError(
            f".npy array of {descr!r} (fortran order {header.get('fortran_order')}): expected ints"
        )
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
        body = {
            "model": model,
            "prompt": random_words(prompt_words, rng),
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": False,
        }
        req = urllib.request.Request(
            host.rstrip("/") + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
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
    return {
        "source": "routed_experts",
        "requests": requests,
        "token_positions": positions,
        "topk": topk,
        "layers": len(per_layer),
        "per_layer": per_layer,
    }


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
    return [
        {"step": int(s), "model": m, "avg_tokens": float(a), "max_tokens": int(x), "balancedness": float(b)}
        for s, m, a, x, b in _EPLB_RE.findall(text)
    ]
