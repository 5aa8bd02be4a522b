"""The chat scenario: vLLM-bench-style random prompts (or a dataset) to /v1/chat/completions, /v1/completions or
/v1/responses (--endpoint)."""

from __future__ import annotations

from vllm_users.measure.record import POOLING_ENDPOINTS
from vllm_users.scenarios.base import LLMUser
from vllm_users.scenarios.request_spec import RequestSpec, responses_body
from vllm_users.workload.source import PromptSource, prompt_source
from vllm_users.workload.ticket import Ticket


class ChatUser(LLMUser):
    """Streams one prompt per ticket; the endpoint follows --endpoint (chat by default)."""

    scenario = "chat"

    def setup_scenario(self) -> None:
        """Build the prompt source from the run's options (random text, --dataset, --tokenizer, --prefix-len)."""
        # the Responses API takes chat messages as its `input` (the server applies the chat template)
        # plain `locust -f chat.py`; `vllm-locust run` swaps users
        if self.options.scenario.endpoint in POOLING_ENDPOINTS:
            raise RuntimeError(
                f"--endpoint {self.options.scenario.endpoint} is sent by the pooling users "
                "(locustfiles/embeddings.py, locustfiles/rerank.py), not ChatUser"
            )
        chat = True if self.options.scenario.endpoint == "responses" else None
        self.prompts: PromptSource = prompt_source(self.options, self.length_model(), chat=chat)

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """Prompt `ticket.index` of the seeded random dataset."""
        p = self.prompts.get(ticket.index)
        body = self.sampling_params(p.output_len)
        if p.messages is not None:
            body["messages"] = p.messages
        else:
            body["prompt"] = p.text
        if self.options.scenario.endpoint == "responses":
            return RequestSpec(
                body=responses_body(body),
                endpoint="responses",
                input_len=p.input_len,
                output_len=p.output_len,
            )
        return RequestSpec(
            body=body, chat=p.messages is not None, input_len=p.input_len, output_len=p.output_len
        )
