#!/usr/bin/env bash
# Device (nvidia-h200), ONE call after the ../shared/gpu recipe's five pieces (recv.sh 1..5), with or without its
# setup.sh: it unpacks /tmp/site (vLLM 0.26) itself when setup.sh did not, and stops setup.sh's `vllm serve`
# (pid in /tmp/vllm.pid) when it runs. Carry nothing: this script and the project come with the working tree.
#   bash benchmarks/gpu/moe_device.sh [bench_gpu_moe.py flags, e.g. --sweep 1,4,16,64]
# 1. builds a random Mixtral (8 experts, top-2; MOE_MODEL_ARGS, default 8 layers, hidden 1024) in /tmp/moe,
# 2. benchmarks/bench_gpu_moe.py: stops the running server, serves /tmp/moe as `moe` (--enforce-eager), runs
#    `--preset moe`, restarts with --enable-return-routed-experts for the router's expert balance, asks vLLM about
#    EPLB on one GPU; stops its server at the end (port 8000 free: setup.sh can serve `rand` again; pass
#    --keep-server to keep it, pid in /tmp/vllm.pid),
# 3. copies to $OUT (at most 8 files, none deeper than 2 folders): moe_gpu.json, moe_console.txt, moe_model.json,
#    vllm_plain.log, vllm_routing.log, moe_runs.tar.gz.
# Every step is bounded by `timeout`; the whole call stays under ~9.5 min (the device's limit is 10).
set -u
T0=$(date +%s)
el() { echo "[+$(($(date +%s) - T0))s] $*"; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/moe-out}
RES=${RES:-/tmp/moe-res}
MOE_MODEL_ARGS=${MOE_MODEL_ARGS:-"--layers 8 --hidden 1024"}
# where things are (overridable for a dry run elsewhere): vLLM's site folder, the pieces, the recipe's model
# (its tokenizer), the MoE model; the Pythons that build the model (the image's torch) and run the benchmark
SITE=${SITE:-/tmp/site}; VW=${VW:-/tmp/vw}; TOKSRC=${TOKSRC:-/tmp/model}; MOE=${MOE:-/tmp/moe}
MODEL_PY=${MODEL_PY:-python3}; PY=${PY:-python3}
BUILD_S=${BUILD_S:-120}
BENCH_S=${BENCH_S:-430}

main() {
  mkdir -p "$OUT" "$RES"
  # 0. vLLM: unpacked by setup.sh, or here from the five pieces (setup.sh's first steps, without its server)
  if [ ! -f "$SITE/.unpacked" ]; then
    [ -f "$VW/bin/pieces.sha256" ] || { el "no /tmp/vw pieces: run ../shared/gpu's recv.sh 1..5 first"; return 3; }
    (cd "$VW" && timeout 60 sha256sum -c --quiet bin/pieces.sha256) || { el "pieces missing or corrupt"; return 3; }
    if ! cat "$VW"/payload.tar.xz.* | timeout 180 xz -dc -T0 | tar xf - -C "$(dirname "$SITE")"; then
      el "unpack failed"; return 4
    fi
    touch "$SITE/.unpacked"
    el "unpacked $SITE"
  fi
  # 1. the model (plain python3: the image's torch and transformers, as recv.sh builds /tmp/model); the
  #    tokenizer copied from /tmp/model once recv.sh's build finished there, else trained again (~10 s)
  if [ ! -f "$MOE/.done" ]; then
    TOK=(); [ -f "$TOKSRC/.done" ] && TOK=(--tokenizer-from "$TOKSRC")
    # shellcheck disable=SC2086  # MOE_MODEL_ARGS is a list of flags
    timeout "$BUILD_S" env -u PYTHONPATH "$MODEL_PY" "$ROOT/benchmarks/gpu/make_moe_model.py" "$MOE" \
      ${TOK[@]+"${TOK[@]}"} $MOE_MODEL_ARGS || { el "model build failed"; return 5; }
  fi
  cp "$MOE/.done" "$OUT/moe_model.json"
  el "model ready: $(cat "$MOE/.done")"
  # 2. the benchmark (SIGTERM from timeout still writes moe_gpu.json)
  timeout -k 15 "$BENCH_S" env PYTHONPATH="$SITE:$ROOT" PYTHONUNBUFFERED=1 "$PY" \
    "$ROOT/benchmarks/bench_gpu_moe.py" --out "$RES" --model-dir "$MOE" --model moe \
    --health-timeout 150 --sweep-timeout 220 "$@"
  rc=$?
  el "bench_gpu_moe.py exit $rc"
  # 3. what comes back
  [ -f "$RES/moe_gpu.json" ] && cp "$RES/moe_gpu.json" "$OUT/"
  for f in vllm_plain.log vllm_routing.log; do
    [ -f "$RES/$f" ] && tail -c 4000000 "$RES/$f" > "$OUT/$f"
  done
  if [ -d "$RES/runs" ]; then
    timeout 60 tar czf "$OUT/moe_runs.tar.gz" -C "$RES" runs
    if [ "$(stat -c %s "$OUT/moe_runs.tar.gz")" -gt 15000000 ]; then  # over one file's 16 MiB: the summaries only
      (cd "$RES" && find runs -name '*.json' -size -2M -print0 | timeout 60 tar czf "$OUT/moe_runs.tar.gz" --null -T -)
    fi
  fi
  el "done; in $OUT: $(find "$OUT" -maxdepth 1 -type f -printf '%f ' )"
  return "$rc"
}

mkdir -p "$OUT"
main "$@" 2>&1 | tee "$OUT/moe_console.txt"
exit "${PIPESTATUS[0]}"
