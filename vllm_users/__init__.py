"""vllm-locust's public API: what a locustfile of your own needs (docs/custom_scenarios.md).

    from vllm_users import LLMUser, RequestSpec, Ticket

    class Summarize(LLMUser):
        def build_request(self, ticket: Ticket) -> RequestSpec:
            body = self.sampling_params(128)
            body["messages"] = [{"role": "user", "content": "Summarise: ..."}]
            return RequestSpec(body=body)

Names load on first use, so `import vllm_users` alone imports neither Locust nor gevent (Locust
monkey-patches the standard library when imported: a locustfile imports vllm_users' users before anything
that uses ssl, as it would import locust first).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "LLMUser": "vllm_users.scenarios.base",
    "RequestSpec": "vllm_users.scenarios.request_spec",
    "Reply": "vllm_users.scenarios.request_spec",
    "RequestFailure": "vllm_users.scenarios.request_spec",
    "Ticket": "vllm_users.workload.ticket",
    "StreamResult": "vllm_users.client.stream",
    "RequestRecord": "vllm_users.measure.record",
    "Prompt": "vllm_users.workload.prompts",
    "random_words": "vllm_users.workload.prompts",
    "prompt_source": "vllm_users.workload.source",
    "ChatUser": "vllm_users.scenarios.chat",
    "JsonUser": "vllm_users.scenarios.json_user",
    "ToolsUser": "vllm_users.scenarios.tools_user",
    "MultiTurnUser": "vllm_users.scenarios.multiturn",
    "BurstUser": "vllm_users.scenarios.burst",
    "BurstShape": "vllm_users.scenarios.burst",
}

__all__ = [
    "BurstShape",
    "BurstUser",
    "ChatUser",
    "JsonUser",
    "LLMUser",
    "MultiTurnUser",
    "Prompt",
    "Reply",
    "RequestFailure",
    "RequestRecord",
    "RequestSpec",
    "StreamResult",
    "Ticket",
    "ToolsUser",
    "prompt_source",
    "random_words",
]
assert sorted(__all__) == sorted(_EXPORTS)  # one list of public names; a test pins it

if TYPE_CHECKING:
    from vllm_users.client.stream import StreamResult
    from vllm_users.measure.record import RequestRecord
    from vllm_users.scenarios.base import LLMUser
    from vllm_users.scenarios.burst import BurstShape, BurstUser
    from vllm_users.scenarios.chat import ChatUser
    from vllm_users.scenarios.json_user import JsonUser
    from vllm_users.scenarios.multiturn import MultiTurnUser
    from vllm_users.scenarios.request_spec import Reply, RequestFailure, RequestSpec
    from vllm_users.scenarios.tools_user import ToolsUser
    from vllm_users.workload.prompts import Prompt, random_words
    from vllm_users.workload.source import prompt_source
    from vllm_users.workload.ticket import Ticket


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vllm_users' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Public names beside the module's own."""
    return sorted(set(globals()) | set(__all__))
