"""Thin, copyable entry points for plain `locust -f` (chat, json, tools, multi-turn, burst, embeddings, rerank;
examples/: custom users).

They ship in the wheel too: `locust -f "$(python -m locustfiles)/chat.py"` runs the installed copy. Locust
imports each file by its own name (not as `locustfiles.<name>`), so this package only says where they are.
"""

import os

__all__ = ["DIR"]

DIR = os.path.dirname(os.path.abspath(__file__))  # the folder that holds the locustfiles
