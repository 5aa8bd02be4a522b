"""What a simulated user does: LLMUser and the chat, json, tools, multi-turn and burst scenarios."""
