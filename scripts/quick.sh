#!/usr/bin/env bash
# The inner loop between commits: ruff, mypy and the unit tier, in a few minutes. It installs nothing; run
# the README's test command (bash scripts/test.sh) once first, and before you push: it runs every tier.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check . # the formatter's output depends on its version: pyproject pins it
"$VENV/bin/mypy" vllm_users orchestration vllm_sim &
mypy_pid=$!
if "$VENV/bin/python" scripts/run_tests.py tests/unit "$@"; then rc=0; else rc=$?; fi
wait "$mypy_pid" || exit $?
exit "$rc"
