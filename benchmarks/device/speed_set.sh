#!/bin/bash
# Device side: issue 45's speed set in its priority order, on one lent GPU, after setup.sh.
# Every stage writes its results under OUT as it goes, so a call cut short keeps them.
#   bash benchmarks/device/speed_set.sh SECONDS      # the wall-clock budget for all stages
# Stages, each bounded by what is left:
#   1. stock and memory saving at 1024x2048 b1 (benchmarks/gpu.py); each process's first
#      step is the warm start, the second reading the driver's cache the first filled
#   2. the PyTorch peer on the same card (benchmarks/peers/torch_deeplab.py)
#   3. the real loop, `tfseg --mode=train` on PNG files (benchmarks/gpu_loop.py)
#   4. XLA: the whole step compiled, memory saving and stock
set -u
BUDGET=${1:-540}; START=$(date +%s); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. /tmp/tfenv.sh
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
stage() {  # stage NAME CAP command...: runs the command for at most min(CAP, what is left)
  local name=$1 cap=$2; shift 2; local t; t=$(left); [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 30 ]; then echo "== $name: skipped, ${t}s left" | tee -a "$OUT/stages.txt"; return; fi
  echo "== $name: up to ${t}s (at $(( $(date +%s) - START ))s)" | tee -a "$OUT/stages.txt"
  timeout -k 5 "$t" "$@" 2>&1 | grep -v '^[IW]0000' | tee -a "$OUT/log.txt" | tail -4
  echo "== $name: rc ${PIPESTATUS[0]} at $(( $(date +%s) - START ))s" | tee -a "$OUT/stages.txt"
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,power.limit --format=csv,noheader \
  | tee "$OUT/stages.txt"
stage full 150 python3 benchmarks/gpu.py --repeats 1 --parity --max_minutes 2.4 \
  --out_dir "$OUT/full" --rows '1024x2048 b1:memory_saving' '1024x2048 b1:stock'
stage torch 150 python3 benchmarks/peers/torch_deeplab.py --sizes 1024x2048x1 --steps 8 \
  --rows bf16_cl_compile bf16_cl_ckpt fp32_tf32 --no_params --out "$OUT/torch_deeplab.jsonl" \
  --max_seconds 145
# Batch norm, as gpu.py's rows have it, so that the loop/step ratio compares one step.
STEP=$(python3 -c "import json; r=[r for r in json.load(open('$OUT/full/gpu.json'))['rows'] if r['name']=='memory_saving' and r['result']]; print('fullres=%s' % r[0]['result']['step_seconds'] if r else '')" 2>/dev/null)
stage loop 170 python3 benchmarks/gpu_loop.py --out "$OUT/gpu_loop.jsonl" --max_seconds 165 \
  --flag=--norm=batch ${STEP:+--step_seconds $STEP}
# XLA compiles the whole step for minutes (over 225 s on an H200, 2026-11-28): last but one.
stage xla 330 python3 benchmarks/gpu.py --repeats 1 --parity --max_minutes 5.4 \
  --out_dir "$OUT/xla" --rows '1024x2048 b1:memory_saving_xla' '1024x2048 b1:stock_xla'
cat "$OUT/stages.txt"
