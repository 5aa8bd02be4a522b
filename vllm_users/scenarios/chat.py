"""The chat scenario: vLLM-bench-style random prompts (or a dataset) to /v1/chat/completions or /v1/completions."""

from __future__ import annotations

from vllm_users.scenarios.base import LLMUser, RequestSpec
from vllm_users.workload.source import PromptSource, prompt_source
from vllm_users.workload.ticket import Ticket


class ChatUser(LLMUser):
    """Streams one prompt per ticket; the endpoint follows --endpoint (chat by default)."""

    scenario = "chat"

    def setup_scenario(self) -> None:
        """Build the prompt source from the run's options (random text, --dataset, --tokenizer, --prefix-len)."""
        self.prompts: PromptSource = prompt_source(self.options, self.length_model())

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """Prompt `ticket.index` of the seeded random dataset."""
        p = self.prompts.get(ticket.index)
        body = self.sampling_params(p.output_len)
        if p.messages is not None:
            body["messages"] = p.messages
        else:
            body["prompt"] = p.text
        return RequestSpec(body=body, chat=p.messages is not None, input_len=p.input_len, output_len=p.output_len)
