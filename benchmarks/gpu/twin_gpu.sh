#!/usr/bin/env bash
# On the device (../shared/gpu recipe, vLLM up): the twin against vLLM with the API-server stage, in as little device
# time as it can: vLLM pinned to CPUs 0-7, the server's load generator to 8-11, and the twin (CPU 12) with its load
# generator (13-15) running its side AT THE SAME TIME as the server's (benchmarks/bench_twin_server.py --side), so a
# round costs one search of device time, not two. Results (twin.json, twin_server*.json) go to $OUT/twin-aN/.
#   bash benchmarks/gpu/twin_gpu.sh pin                 # vLLM's processes onto CPUs 0-7
#   bash benchmarks/gpu/twin_gpu.sh calibrate N [BUDGET]  # calibrate --api-server-count N into /tmp/twin-aN
#   bash benchmarks/gpu/twin_gpu.sh rounds N FIRST COUNT [loads]  # search rounds FIRST.. (and the loads), both sides
#   bash benchmarks/gpu/twin_gpu.sh restart N           # vLLM again with --api-server-count N (CUDA graphs)
set -uo pipefail
export PYTHONPATH=/tmp/site:. VLLM_LOCUST_E2E_PIN=0
H=http://127.0.0.1:8000
SLO="--find-max-rate --goodput ttft:300 tpot:25 --slo-percentile 90 --input-len 1024 --output-len 64 --ignore-eos --workers 4"
T0=$(date +%s); el() { echo "[+$(( $(date +%s) - T0 ))s] $*"; }
save() { mkdir -p "$OUT/twin-a$1"; cp /tmp/twin-a"$1"/*.json "$OUT/twin-a$1/" 2>/dev/null; true; }
pin() {
  for p in $(pgrep -s "$(cat /tmp/vllm.pid)"); do taskset -a -p -c 0-7 "$p" >/dev/null; done
  el "vLLM pinned: $(pgrep -s "$(cat /tmp/vllm.pid)" | wc -l) processes on CPUs 0-7"
}
case "$1" in
  pin) pin ;;
  calibrate)
    N=$2; B=${3:-90}
    taskset -c 8-15 python3 -m benchmarks.bench_twin_server --host $H --model rand --work /tmp/twin-a"$N" \
      --side server --phases calibrate --budget "$B" \
      --calibrate-args "--max-concurrency 256 --saturation-requests 320 --api-server-count $N" 2>&1 | tail -60
    el "calibrated"; save "$N" ;;
  rounds)
    N=$2; FIRST=$3; COUNT=$4; PH=search
    [ "${5:-}" = loads ] && PH=loads,search; [ "${5:-}" = loads ] && [ "$COUNT" = 0 ] && PH=loads
    taskset -c 8-11 python3 -m benchmarks.bench_twin_server --host $H --model rand --work /tmp/twin-a"$N" \
      --side server --phases "$PH" --rounds "$COUNT" --first-round "$FIRST" --slo "$SLO" > /tmp/twin-a"$N"/server.log 2>&1 &
    S=$!
    taskset -c 13-15 python3 -m benchmarks.bench_twin_server --host $H --model rand --work /tmp/twin-a"$N" \
      --side twin --sim-cpu 12 --phases "$PH" --rounds "$COUNT" --first-round "$FIRST" --slo "$SLO" > /tmp/twin-a"$N"/twin.log 2>&1 &
    T=$!
    wait $S $T
    tail -25 /tmp/twin-a"$N"/server.log; tail -12 /tmp/twin-a"$N"/twin.log
    python3 -m benchmarks.bench_twin_server --host $H --model rand --work /tmp/twin-a"$N" --phases merge 2>&1 | tail -30
    cp /tmp/twin-a"$N"/*.log "$OUT/" 2>/dev/null
    el "rounds done"; save "$N" ;;
  restart)
    N=$2; kill -- -"$(cat /tmp/vllm.pid)" 2>/dev/null
    for i in $(seq 1 60); do pgrep -s "$(cat /tmp/vllm.pid)" >/dev/null || break; sleep 1; done
    for i in $(seq 1 30); do curl -sf $H/health >/dev/null || break; sleep 1; done
    el "old vLLM gone"
    VLLM_EAGER= bash /tmp/vw/bin/setup.sh --no-enable-prefix-caching --max-num-seqs 256 --api-server-count "$N" 2>&1 | tail -5
    pin ;;
esac
