#!/bin/bash
# Device side: issue 45's speed set in its priority order, on one lent GPU, after setup.sh.
# Every stage writes its results under OUT as it goes, so a call cut short keeps them.
#   bash benchmarks/device/speed_set.sh SECONDS      # the wall-clock budget for all stages
# Stages (each bounded by what is left):
#   1. XLA: stock and memory saving at 1024x2048 b1, compiled and not (benchmarks/gpu.py)
#   2. the PyTorch peer on the same card (benchmarks/peers/torch_deeplab.py)
#   3. the real loop, `tfseg --mode=train` on PNG files (benchmarks/gpu_loop.py)
#   4. 513x513 b2 and bf16 rows (gpu.py); the warm start is each process's first step
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
stage xla_full 270 python3 benchmarks/gpu.py --repeats 1 --parity --max_minutes 4.5 \
  --out_dir "$OUT/xla" --rows '1024x2048 b1:memory_saving' '1024x2048 b1:memory_saving_xla' \
  '1024x2048 b1:stock' '1024x2048 b1:stock_xla'
stage torch 100 python3 benchmarks/peers/torch_deeplab.py --sizes 1024x2048x1 --steps 8 \
  --rows fp32_tf32 bf16_cl bf16_cl_ckpt --no_params --out "$OUT/torch_deeplab.jsonl" --max_seconds 95
# Batch norm, as gpu.py's rows have it, so that the loop/step ratio compares one step.
STEP=$(python3 -c "import json; r=[r for r in json.load(open('$OUT/xla/gpu.json'))['rows'] if r['name']=='memory_saving' and r['result']]; print('fullres=%s' % r[0]['result']['step_seconds'] if r else '')" 2>/dev/null)
stage loop 150 python3 benchmarks/gpu_loop.py --out "$OUT/gpu_loop.jsonl" --max_seconds 140 \
  --flag=--norm=batch ${STEP:+--step_seconds $STEP}
stage more 240 python3 benchmarks/gpu.py --repeats 1 --parity --max_minutes 4 \
  --out_dir "$OUT/more" --rows '513x513 b2:memory_saving' '513x513 b2:memory_saving_xla' \
  '513x513 b2:stock' '1024x2048 b1:memory_saving_bf16' '1024x2048 b1:memory_saving_bf16_xla'
stage torch_compile 150 python3 benchmarks/peers/torch_deeplab.py --sizes 1024x2048x1 \
  --rows bf16_cl_compile --no_params --out "$OUT/torch_deeplab.jsonl" --max_seconds 140
cat "$OUT/stages.txt"
