#!/usr/bin/env bash
# Device: this tree against the code before the loop fixes (.gpu_before), both driving real vLLM, ABBA
# with repeats, each run grounded in vLLM's own TTFT histogram (client minus server) by benchmarks/bench_gpu_vllm.py.
#
#   On the device, after ../shared/gpu's setup.sh (vLLM serving `rand` at 127.0.0.1:8000, tokenizer /tmp/model):
#     bash benchmarks/gpu/loop_lag_ab.sh            carry [".gpu_before"] (git-ignored: it is not sent without it)
#   Here, a dry run against the simulator (no vLLM, no `vllm bench` needed):
#     PY=.venv/bin/python SITE= HOST=http://127.0.0.1:8231 TOK=$PWD/.loopwhl/tok CONC="4" RPS=2 WORKERS=1 \
#       OUT=/tmp/ab bash benchmarks/gpu/loop_lag_ab.sh
#
# Writes to $OUT: ab_c<C>.json / ab_c<C>.txt per concurrency (every run and the medians), results_c<C>/ (each run's
# result.json), preflight.txt, and summary.txt. Each step is bounded by `timeout`; nothing runs in the background,
# so there is no `wait` (a bare one would also wait for the background `vllm serve` and hang the call).
# Knobs (environment): CONC (default "256 16", one bench invocation each, so a cut-short call keeps the first),
# REPEATS (2: rounds ours/before, before/ours = ABBA), RPS (requests per stream, 6), WORKERS (4), BEFORE
# (.gpu_before), TOOLS (default "ours,ours:$BEFORE"; add ",bench" for vllm bench serve), PER_RUN_S (150, one run's
# limit), STEP_S (270, one concurrency's limit), SEED (first seed; each run adds one), PY (python3), SITE (/tmp/site).
set -u
T0=$(date +%s); el() { echo "[+$(( $(date +%s) - T0 ))s] $*"; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT" || exit 2
OUT=${OUT:-/tmp/loop_lag_ab}; mkdir -p "$OUT"
PY=${PY:-python3}; SITE=${SITE-/tmp/site}
case $PY in */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")";; esac   # absolute: the before side cds
HOST=${HOST:-http://127.0.0.1:8000}; MODEL=${MODEL:-rand}; TOK=${TOK:-/tmp/model}
CONC=${CONC:-256 16}; REPEATS=${REPEATS:-2}; RPS=${RPS:-6}; WORKERS=${WORKERS:-4}
BEFORE=${BEFORE:-.gpu_before}; TOOLS=${TOOLS:-ours,ours:$BEFORE}
PER_RUN_S=${PER_RUN_S:-150}; STEP_S=${STEP_S:-270}; SEED=${SEED:-$(( $(date +%s) % 90000 + 1000 ))}
# this tree on the path (not /tmp/proj: the payload's copy is older); the before tree is put first by the bench
export PYTHONPATH="${SITE:+$SITE:}$ROOT" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

{
  el "preflight: $HOST model=$MODEL tokenizer=$TOK tools=$TOOLS conc=[$CONC] repeats=$REPEATS workers=$WORKERS"
  ok=1
  timeout 10 curl -sf "$HOST/health" >/dev/null || { echo "FAIL: no $HOST/health"; ok=0; }
  timeout 10 curl -sf "$HOST/metrics" | grep -q '^vllm:time_to_first_token_seconds_count' \
    || { echo "FAIL: $HOST/metrics has no vllm:time_to_first_token_seconds"; ok=0; }
  [ -e "$TOK" ] || { echo "FAIL: tokenizer $TOK missing"; ok=0; }
  case ",$TOOLS," in *",ours:$BEFORE,"*)
    [ -f "$BEFORE/orchestration/cli.py" ] || { echo "FAIL: $BEFORE is not here (carry it: it is git-ignored)"; ok=0; }
  esac
  # which code each side imports: a before run that imports this tree's modules would compare nothing
  timeout 60 "$PY" -c 'import sys, locust, gevent, vllm_users, orchestration, prometheus_client, tokenizers
print(sys.version.split()[0], "locust", locust.__version__, "gevent", gevent.__version__, "ours:", vllm_users.__file__)' \
    || { echo "FAIL: this tree does not import"; ok=0; }
  if [ -d "$BEFORE" ]; then
    (cd "$BEFORE" && PYTHONPATH="$(pwd):$PYTHONPATH" timeout 60 "$PY" -c 'import vllm_users, orchestration.cli
print("before:", vllm_users.__file__, orchestration.cli.__file__)') || { echo "FAIL: $BEFORE does not import"; ok=0; }
  fi
  nproc; nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1
  echo "ok=$ok"
} > "$OUT/preflight.txt" 2>&1
cat "$OUT/preflight.txt"
grep -q '^ok=1$' "$OUT/preflight.txt" || { el "preflight failed: nothing run"; exit 3; }

rc_all=0
for c in $CONC; do
  el "concurrency $c: $(( REPEATS * $(echo "$TOOLS" | tr ',' '\n' | wc -l) )) runs, seeds from $SEED"
  before_dirs=$(ls -d benchmarks/results/bench-gpu-* 2>/dev/null | sort)
  timeout -k 20 "$STEP_S" "$PY" benchmarks/bench_gpu_vllm.py --host "$HOST" --model "$MODEL" --tokenizer "$TOK" \
    --concurrency "$c" --repeats "$REPEATS" --requests-per-stream "$RPS" --workers "$WORKERS" --tools "$TOOLS" \
    --seed "$SEED" --timeout "$PER_RUN_S" --name "loop_lag_ab_c$c" > "$OUT/ab_c$c.txt" 2>&1
  rc=$?; [ $rc -eq 0 ] || { rc_all=$rc; el "concurrency $c: bench exit $rc (124: cut at STEP_S=$STEP_S)"; }
  cp "benchmarks/results/loop_lag_ab_c$c.json" "$OUT/ab_c$c.json" 2>/dev/null || el "concurrency $c: no JSON"
  new=$(comm -13 <(echo "$before_dirs") <(ls -d benchmarks/results/bench-gpu-* 2>/dev/null | sort) | tail -1)
  if [ -n "$new" ]; then  # each run's result.json (small); the worker logs of a run that wrote none
    for d in "$new"/*/; do
      n=$(basename "$d"); mkdir -p "$OUT/results_c$c/$n"
      if [ -f "$d/result.json" ]; then cp "$d/result.json" "$OUT/results_c$c/$n/"; else
        for f in "$d"/*.log "$d"/*.out; do [ -f "$f" ] && tail -c 20000 "$f" > "$OUT/results_c$c/$n/$(basename "$f")"; done
      fi
    done
  fi
  SEED=$(( SEED + 100 ))
done

{
  el "summary (client minus server = mean TTFT ours - vLLM's histogram mean, per run)"
  for c in $CONC; do grep -v '^ *$' "$OUT/ab_c$c.txt" 2>/dev/null | sed -n '/== every run/,$p'; done
  grep -h 'bench_gpu_vllm:' "$OUT"/ab_c*.txt 2>/dev/null
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
el "done (exit $rc_all)"
exit $rc_all
