"""The vision scenario: chat prompts with random images, like `vllm bench serve`'s random-mm.

Each request is the chat scenario's prompt (--input-len text tokens) with max(--images, 1) image_url parts
after its text (`LLMUser.send` attaches them: vllm_users/workload/images.py). Where the prompt text's token
count is exact (a word-table calibration or --tokenizer, no dataset, no shared prefix, the server's template
tokens measured), the record's image tokens are usage.prompt_tokens less that count; otherwise only the number
of images is kept.
"""

from __future__ import annotations

from vllm_users.errors import UsageError
from vllm_users.scenarios.chat import ChatUser
from vllm_users.scenarios.request_spec import RequestSpec
from vllm_users.workload.images import IMAGES_NEED_CHAT
from vllm_users.workload.prompts import Prompt
from vllm_users.workload.ticket import Ticket

__all__ = ["VisionUser"]


class VisionUser(ChatUser):
    """Chat with images: max(--images, 1) random images per request (--image-size, --image-format)."""

    scenario = "vision"
    min_images = 1

    def setup_scenario(self) -> None:
        """The chat scenario's prompts; images need chat messages (`vllm-locust run` says so before the load)."""
        if self.options.scenario.endpoint != "chat":
            raise UsageError(IMAGES_NEED_CHAT)
        super().setup_scenario()

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """The chat scenario's request, with the text's exact token count for the image-token estimate."""
        p = self.prompts.get(ticket.index)
        body = self.sampling_params(p.output_len)
        body["messages"] = p.messages
        return RequestSpec(
            body=body,
            chat=True,
            input_len=p.input_len,
            output_len=p.output_len,
            context={"text_tokens": self.text_tokens(p)},
        )

    def text_tokens(self, p: Prompt) -> int | None:
        """Tokens the server counts for the prompt's text, template included, when known exactly; else None."""
        o = self.options
        lm = self.length_model()
        if (
            o.prompt.dataset
            or o.prefix.prefix_len
            or not (lm.exact or o.prompt.tokenizer)
            or not isinstance(lm.overhead, int)
        ):
            return None
        return p.input_len + lm.overhead
