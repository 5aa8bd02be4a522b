#!/usr/bin/env bash
# On the device (../shared/gpu recipe, server up): where a worker's CPU goes against real vLLM.
# A closed loop of STREAMS users over WORKERS workers; after WARM s, py-spy samples one worker for SECS s.
#   PYSPY=/path/to/py-spy bash benchmarks/gpu/profile_worker_gpu.sh [STREAMS] [WORKERS] [SECS]
# Prints the inclusive and self shares (benchmarks/profile_worker.py's summary) and the run's worker CPU.
set -uo pipefail
STREAMS=${1:-256}; WORKERS=${2:-4}; SECS=${3:-15}; WARM=${WARM:-12}
OUT=$(mktemp -d /tmp/prof-XXXX); PY=${PYTHON:-python3}
N=$((STREAMS * 14))
$PY -m orchestration.cli run --host http://127.0.0.1:8000 --model rand --tokenizer /tmp/model \
  --users "$STREAMS" --num-prompts "$N" --workers "$WORKERS" --input-len 128 --output-len 128 --ignore-eos \
  --seed "$RANDOM" --output-dir "$OUT" --run-name prof --no-report --quiet >"$OUT/run.log" 2>&1 &
RUN=$!
sleep "$WARM"
W=$(pgrep -f "locust.*--worker" | head -1)
echo "profiling worker pid $W for $SECS s"
"${PYSPY:-py-spy}" record -r 250 -d "$SECS" -f raw -p "$W" -o "$OUT/spy.txt" --nonblocking >"$OUT/spy.log" 2>&1 \
  || { echo "py-spy failed:"; tail -5 "$OUT/spy.log"; }
wait "$RUN"; echo "run exit $?"
[ -s "$OUT/spy.txt" ] && $PY -c "
import sys; sys.path.insert(0, 'benchmarks')
from pathlib import Path
from profile_worker import summarize
print(summarize(Path('$OUT/spy.txt'), 40))"
$PY - "$OUT/prof/result.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
w = (r.get("client_health") or {}).get("workers") or {}
print("output tok/s", r.get("output_throughput"), "mean TTFT", r.get("mean_ttft_ms"), "mean TPOT", r.get("mean_tpot_ms"))
for k, v in w.items():
    print(k, {x: v.get(x) for x in ("cpu_mean", "loop_lag_p99_ms", "lag_runq_share", "verdict")})
PYEOF
