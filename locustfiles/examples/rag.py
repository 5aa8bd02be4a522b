"""Retrieval-augmented answers: a long context document (--input-len tokens), then a question about it.

    vllm-locust run -f locustfiles/examples/rag.py --workers 2 --num-prompts 100 --input-len 2000 --output-len 128

Each request carries one of DOCUMENTS documents (so a server with prefix caching reuses them: see
`prefix_cache_hit_rate` in result.json) and a new question; an answer must not be empty (`valid`).
"""

from __future__ import annotations

import random

from vllm_users import LLMUser, RequestRecord, RequestSpec, StreamResult, Ticket, random_words

DOCUMENTS = 8  # distinct context documents, shared by every user of the run (same --seed, same texts)
SYSTEM = "Answer the question from the context only. Say 'not in the context' when it is not there."


class RagUser(LLMUser):
    """Long context + short question; the answer is checked for content."""

    scenario = "rag"

    def setup_scenario(self) -> None:
        """The documents, once per user: --input-len tokens each, exact as calibrated against the server."""
        lengths = self.length_model()
        seed = self.options.request.seed
        n = self.options.request.input_len
        self.documents = [lengths.text(n, random.Random(f"doc:{seed}:{k}")) for k in range(DOCUMENTS)]

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """Document `index % DOCUMENTS` and a question drawn from the ticket's index."""
        rng = random.Random(f"question:{self.options.request.seed}:{ticket.index}")
        question = f"What does the context say about {random_words(4, rng)}?"
        body = self.sampling_params(self.options.request.output_len)
        body["messages"] = [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": f"Context:\n{self.documents[ticket.index % DOCUMENTS]}\n\nQuestion: {question}",
            },
        ]
        return RequestSpec(
            body=body,
            want_text=True,
            input_len=self.options.request.input_len,
            output_len=self.options.request.output_len,
            context={"document": ticket.index % DOCUMENTS},
        )

    def check(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """An empty answer is not an answer: valid=False (result.json's validity_rate counts it)."""
        rec.valid = bool(res.text.strip())
        rec.extra = {"document": spec.context["document"]}  # kept in records.jsonl
