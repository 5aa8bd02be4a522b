"""Tool-calling load test: `locust -f locustfiles/tools.py --host http://127.0.0.1:8000`.

--tool-choice auto|required|<function name>, --tool-followup; tool calls are validated (invalid_tool_call).
"""

from vllm_users.scenarios.tools_user import ToolsUser

__all__ = ["ToolsUser"]
