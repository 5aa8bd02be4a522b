"""The pooling users: `/v1/embeddings` (EmbeddingsUser) and `/v1/rerank` or `/v1/score` (RerankUser).

Their answers are one JSON body each, with no output tokens: a record has an E2EL (the end of the body), its
prompt tokens from `usage`, and no TTFT/ITL/TPOT (absent, never 0; docs/scenarios.md "Embeddings and rerank").
Inputs are the chat scenario's prompts (random text at --input-len tokens, --dataset, --tokenizer) without a chat
template: an embedding input, a rerank query and each of its documents are one prompt each.
"""

from __future__ import annotations

from typing import Any

from vllm_users.client.stream import StreamResult
from vllm_users.measure.record import RequestRecord
from vllm_users.scenarios.base import LLMUser
from vllm_users.scenarios.request_spec import RequestSpec
from vllm_users.workload.source import PromptSource, prompt_source
from vllm_users.workload.ticket import Ticket

__all__ = ["EmbeddingsUser", "RerankUser", "answered_items", "embeddings_body", "rerank_body"]


def answered_items(api: str, body: Any) -> int | None:
    """How many inputs a pooling answer answered: embeddings' and score's `data`, rerank's `results` (None: no
    list)."""
    items = body.get("results" if api == "rerank" else "data") if isinstance(body, dict) else None
    return len(items) if isinstance(items, list) else None


def embeddings_body(texts: list[str]) -> dict[str, Any]:
    """An `/v1/embeddings` body (without model): one input, or a list input when more than one."""
    return {"input": texts if len(texts) > 1 else texts[0], "encoding_format": "float"}


def rerank_body(endpoint: str, query: str, docs: list[str]) -> dict[str, Any]:
    """A `/v1/rerank` (query + documents) or `/v1/score` (text_1 + text_2 list) body, without model."""
    if endpoint == "score":
        return {"text_1": query, "text_2": docs}
    return {"query": query, "documents": docs}


class _PoolingUser(LLMUser):
    """What both pooling users share: a prompt source without chat template, and the answer's item count check."""

    abstract = True

    def setup_scenario(self) -> None:
        """Plain-text prompts from the run's options (random text, --dataset, --tokenizer)."""
        self.prompts: PromptSource = prompt_source(self.options, self.length_model(), chat=False)

    def texts(self, first: int, n: int) -> tuple[list[str], int]:
        """Prompts `first`..`first + n - 1` as texts, and their requested tokens in all."""
        ps = [self.prompts.get(first + k) for k in range(n)]
        return [p.text or "" for p in ps], sum(p.input_len for p in ps)

    def spec(self, endpoint: str, body: dict[str, Any], input_len: int, items: int) -> RequestSpec:
        """A non-streamed pooling request that must answer `items` inputs."""
        body = {"model": self.model, **body}
        return RequestSpec(
            body=body, chat=False, endpoint=endpoint, input_len=input_len, context={"items": items}
        )

    def check(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """An answer must answer every input (one vector, score or result each)."""
        want = spec.context.get("items")
        got = answered_items(rec.endpoint, res.body)
        if want is not None and got != want:
            rec.error = "bad_response"
            rec.error_detail = f"{rec.endpoint} answer has {got} items for {want} inputs"


class EmbeddingsUser(_PoolingUser):
    """`/v1/embeddings`: --embed-batch inputs per request (a list input when more than one), each at --input-len."""

    scenario = "embeddings"

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """Inputs `ticket.index * N` .. of the seeded prompts (N = --embed-batch: every input differs)."""
        n = self.options.scenario.embed_batch
        texts, tokens = self.texts(ticket.index * n, n)
        return self.spec("embeddings", embeddings_body(texts), tokens, n)


class RerankUser(_PoolingUser):
    """`/v1/rerank` (query + documents) or `/v1/score` (text_1 + text_2 list) by --endpoint: one query and
    --rerank-docs documents, each at --input-len."""

    scenario = "rerank"

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """Query and documents from prompts `ticket.index * (N + 1)` .. (N = --rerank-docs)."""
        n = self.options.scenario.rerank_docs
        texts, tokens = self.texts(ticket.index * (n + 1), n + 1)
        api = "score" if self.options.scenario.endpoint == "score" else "rerank"
        return self.spec(api, rerank_body(api, texts[0], texts[1:]), tokens, n)
