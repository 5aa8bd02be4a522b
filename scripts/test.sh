#!/usr/bin/env bash
# The README's test command: install into a fresh venv, lint, type-check, run every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -e '.[test]'
"$VENV/bin/ruff" check .
"$VENV/bin/mypy" vllm_users orchestration
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
