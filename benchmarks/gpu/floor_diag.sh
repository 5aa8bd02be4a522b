#!/usr/bin/env bash
# On the device (../shared/gpu recipe, server up): ours against the floor client at C streams, one run each, with
# the kernel's count of accepted TCP connections (/proc/net/snmp PassiveOpens) around every run: a client that
# reconnects per request shows it there. Each run's JSON (and ours' records) go to $OUT.
#   bash benchmarks/gpu/floor_diag.sh [C] [WORKERS] [REQUESTS_PER_STREAM] [TOOLS...]
# TOOLS: ours, raw, bench, ours-nometrics (ours with --no-server-metrics); default: ours raw ours-nometrics
set -uo pipefail
C=${1:-1024}; W=${2:-8}; R=${3:-4}; shift 3 2>/dev/null || true
TOOLS=${*:-ours raw ours-nometrics}
export PYTHONPATH=/tmp/site:.
opens() { awk '/^Tcp:/ {n++; if (n==1) for (i=1;i<=NF;i++) h[i]=$i; else for (i=1;i<=NF;i++) if (h[i]=="PassiveOpens") print $i}' /proc/net/snmp; }
for t in $TOOLS; do
  tool=$t; extra=""
  [ "$t" = ours-nometrics ] && { tool=ours; extra="--no-server-metrics"; }
  before=$(opens)
  python3 benchmarks/bench_gpu_vllm.py --concurrency "$C" --repeats 1 --tools "$tool" --workers "$W" \
    --requests-per-stream "$R" --name "diag-$t" --timeout 280 --ours-args="$extra" 2>&1 | tail -2
  after=$(opens)
  echo "$t: accepted connections during the run: $((after - before)) (requests $((C * R)))"
  cp "benchmarks/results/diag-$t.json" "$OUT/" 2>/dev/null
  rec=$(ls -t {benchmarks/results,/tmp}/bench-gpu-*/ours-c"$C"-*/records.jsonl 2>/dev/null | head -1)
  [ -n "$rec" ] && cp "$(dirname "$rec")/result.json" "$OUT/diag-$t-result.json"
  [ "$tool" = ours ] && [ -n "$rec" ] && python3 - "$rec" "$OUT/diag-$t-records.json" <<'PYEOF'
import json, sys
rows = []
for line in open(sys.argv[1]):
    r = json.loads(line) if line.strip() else {}
    if r.get("chunk_times_us") and r.get("t_start") is not None:
        rows.append([r["t_start"], r["chunk_times_us"][0] / 1e6, r.get("worker"), r.get("end_us", 0) / 1e6])
json.dump(rows, open(sys.argv[2], "w"))
PYEOF
  raw=$(ls -t {benchmarks/results,/tmp}/bench-gpu-*/raw-c"$C"-*.json 2>/dev/null | head -1)
  [ -n "$raw" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); json.dump(d['rows'], open(sys.argv[2],'w'))" \
    "$raw" "$OUT/diag-$t-rows.json"
  rm -rf benchmarks/results/bench-gpu-*
done
