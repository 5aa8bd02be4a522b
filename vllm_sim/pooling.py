"""The pooling APIs of a pooling model: `/v1/embeddings`, `/v1/rerank` and `/v1/score`, shaped like vLLM 0.32's.

Token counts: an embedding input is its text's tokens (the simulator's tokenizer adds no BOS); a rerank or score
pair is the query's tokens plus the document's. Vectors (`--embed-dim` floats) and relevance scores in [0, 1) are
seeded by the texts, so the same input gets the same answer. How long one takes is the server's business
(`pooling_delay_s`: one step and the prefill of each input; --fixed: exactly --ttft-ms), documented in
docs/simulator.md.
"""

from __future__ import annotations

import json
import random
import secrets
import time
import zlib
from typing import Any

from . import tokenizer as tok
from .config import SimConfig
from .engine import prefill_pairs, step_seconds
from .request import ApiError, json_object

__all__ = ["PATHS", "answer", "pooling_delay_s"]

PATHS = {
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
    "/v2/rerank": "rerank",
    "/v1/score": "score",
    "/score": "score",
}


def _ids(x: Any, field: str) -> list[int]:
    """Token ids of one text (or of a list of ids, as vLLM accepts)."""
    if isinstance(x, str):
        return tok.encode_text(x)
    if isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) for t in x):
        return [int(t) for t in x]
    raise ApiError(400, f"{field}: each input must be a string or a list of token ids", field)


def _texts(body: dict[str, Any], field: str, many: bool) -> list[Any]:
    v = body.get(field)
    if v is None:
        raise ApiError(400, f"{field}: field required", field)
    if many and isinstance(v, list) and v and not all(isinstance(t, int) for t in v):
        return list(v)
    return [v]


def _score(a: str, b: str) -> float:
    """A relevance score in [0, 1), the same for the same pair."""
    return (zlib.crc32((a + "\x00" + b).encode()) % 1_000_000) / 1_000_000


def _usage(n: int) -> dict[str, Any]:
    return {"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0, "prompt_tokens_details": None}


def answer(api: str, raw: bytes, model: str, max_model_len: int, embed_dim: int) -> tuple[bytes, list[int]]:
    """(JSON body, the prompt tokens of each input or pair) of a pooling request; ApiError (vLLM's status and
    message) on bad input."""
    body = json_object(raw)
    name = body.get("model") or model
    if name != model:
        raise ApiError(404, f"The model `{name}` does not exist.", "model")
    created = int(time.time())
    if api == "embeddings":
        inputs = _texts(body, "input", True)
        ids = [_ids(x, "input") for x in inputs]
        _check_len(ids, max_model_len)
        data = []
        for i, x in enumerate(inputs):
            rng = random.Random(zlib.crc32(json.dumps(x).encode()))  # the same input, the same vector
            data.append(
                {
                    "index": i,
                    "object": "embedding",
                    "embedding": [rng.uniform(-1, 1) for _ in range(embed_dim)],
                }
            )
        lens = [len(t) for t in ids]
        obj: dict[str, Any] = {
            "id": "embd-" + secrets.token_hex(8),
            "object": "list",
            "created": created,
            "model": model,
            "data": data,
            "usage": _usage(sum(lens)),
        }
        return json.dumps(obj, separators=(",", ":")).encode(), lens
    q_field, d_field = ("query", "documents") if api == "rerank" else ("text_1", "text_2")
    query = body.get(q_field)
    docs = _texts(body, d_field, True)
    if not isinstance(query, str):
        raise ApiError(400, f"{q_field} must be a string", q_field)
    if not all(isinstance(d, str) for d in docs) or not docs:
        raise ApiError(400, f"{d_field} must be a non-empty list of strings", d_field)
    q_ids = tok.encode_text(query)
    pairs = [len(q_ids) + len(tok.encode_text(d)) for d in docs]
    if max(pairs) > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, a query and "
            f"document have {max(pairs)} tokens.",
            "input_tokens",
        )
    n = sum(pairs)
    scores = [_score(query, d) for d in docs]
    if api == "score":
        obj = {
            "id": "score-" + secrets.token_hex(8),
            "object": "list",
            "created": created,
            "model": model,
            "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
            "usage": _usage(n),
        }
        return json.dumps(obj, separators=(",", ":")).encode(), pairs
    order = sorted(range(len(docs)), key=lambda i: -scores[i])
    top_n = body.get("top_n")
    if isinstance(top_n, int) and not isinstance(top_n, bool) and top_n > 0:
        order = order[:top_n]
    results = [{"index": i, "document": {"text": docs[i]}, "relevance_score": scores[i]} for i in order]
    obj = {
        "id": "rerank-" + secrets.token_hex(8),
        "model": model,
        "usage": {"total_tokens": n},
        "results": results,
    }
    return json.dumps(obj, separators=(",", ":")).encode(), pairs


def _check_len(ids: list[list[int]], max_model_len: int) -> None:
    for t in ids:
        if len(t) > max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {len(t)} tokens in the input for embedding generation. Please reduce "
                "the length of the input.",
                "input_tokens",
            )


def pooling_delay_s(lengths: list[int], cfg: SimConfig) -> float:
    """How long a pooling request takes: one engine step with the prefill of each input (`lengths`: each one its
    own sequence, attending only over its own tokens), on its own: pooling requests are not batched with
    generation in the simulator."""
    token_pairs = sum(prefill_pairs(0, n) for n in lengths) if cfg.prefill_per_ctx_token_ns else 0
    return step_seconds(cfg, 0, 0, sum(lengths), token_pairs)
