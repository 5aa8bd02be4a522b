"""A custom user in 15 lines: `vllm-locust run -f locustfiles/examples/minimal.py --workers 2 --num-prompts 50`."""

import random

from vllm_users import LLMUser, RequestSpec, Ticket, random_words


class HaikuUser(LLMUser):
    scenario = "haiku"

    def build_request(self, ticket: Ticket) -> RequestSpec:
        body = self.sampling_params(self.options.request.output_len)  # model, max_tokens, stream+usage, seed
        topic = random_words(6, random.Random(ticket.index))  # the same seed gives the same prompts
        body["messages"] = [{"role": "user", "content": f"Write a haiku about {topic}"}]
        return RequestSpec(body=body, output_len=self.options.request.output_len)
