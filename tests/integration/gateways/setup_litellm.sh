#!/usr/bin/env bash
# Build (or reuse) LiteLLM's proxy for the gateway tier: a real Python gateway from PyPI that re-serializes the
# stream (tests/integration/gateways/test_python_gateway.py).
#
#   tests/integration/gateways/setup_litellm.sh [CACHE_DIR]
#
# CACHE_DIR defaults to $VLLM_LOCUST_CACHE, else ~/.cache/vllm-locust. It ends up holding litellm-venv/, a venv
# of its own (LiteLLM pins its own openai, pydantic and fastapi: they stay out of the project's venv), with
# litellm[proxy]==$LITELLM_VERSION and what it needs pinned by litellm-constraints.txt beside this script.
# Idempotent: rebuilt only when its stamp differs from the hash of the pins. ~1.5 min the first time.
# Prints the proxy's command on its last line: LITELLM=PATH.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${1:-${VLLM_LOCUST_CACHE:-$HOME/.cache/vllm-locust}}"
mkdir -p "$CACHE_DIR"
CACHE_DIR="$(cd "$CACHE_DIR" && pwd)"
LITELLM_VERSION="1.108.7"
CONSTRAINTS="$HERE/litellm-constraints.txt"
VENV="$CACHE_DIR/litellm-venv"

log() { echo "[setup_litellm $(date +%H:%M:%S)] $*" >&2; }
hash_of() { { cat "$@" 2>/dev/null || true; } | sha256sum | cut -c1-16; }

exec 9>"$CACHE_DIR/.setup-litellm.lock"
flock 9

WANT="litellm=$LITELLM_VERSION constraints=$(hash_of "$CONSTRAINTS")"
if [[ -x "$VENV/bin/litellm" && "$(cat "$VENV/.vllm-locust-stamp" 2>/dev/null)" == "$WANT" ]]; then
    log "venv up to date: $VENV"
else
    log "building $VENV (litellm[proxy]==$LITELLM_VERSION, ~1.5 min)"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        "litellm[proxy]==$LITELLM_VERSION" -c "$CONSTRAINTS"
    echo "$WANT" >"$VENV/.vllm-locust-stamp"
    log "venv ready"
fi
echo "LITELLM=$VENV/bin/litellm"
