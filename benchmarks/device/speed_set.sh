#!/bin/bash
# Device side: the GPU speed set (docs/benchmarks.md, "On a GPU") in its priority order, on
# one lent GPU, after setup.sh.
# Every stage writes its results under OUT as it goes, so a call cut short keeps them.
#   bash benchmarks/device/speed_set.sh SECONDS [STAGE,...]   # budget for the stages named
#   bash benchmarks/device/speed_set.sh 420 first    # call 1: blocks, launches, full
#   bash benchmarks/device/speed_set.sh 360 second   # call 2, warm machine: torch, loop, xla,
#                                                    # dilated, bf16, parity, largest
# A task's device time is 15 minutes: the install's calls (about a minute), then these two.
# Each stage is capped; in the second call the largest batch runs only if time is left.
# Stages, each bounded by what is left:
#   blocks   --jit_compile=blocks (tfseg.xla.Blocks): memory saving and stock at 1024x2048 b1,
#            memory saving at 513x513 b2 and in bf16, each profiled (busy from the trace);
#            then benchmarks/launches.py at 1024x2048 b1: ops, compilations, the first step
#            of a fresh process and of a second one reading the compilation cache
#   full     memory saving, stock, and memory saving with grouped depthwise convs at 1024x2048
#            b1 (benchmarks/gpu.py); each process's
#            first step is the warm start, the second reading the driver's cache the first filled;
#            one more step of each profiled: its time by op type (tfseg.profile.timeline)
#   torch    the PyTorch peer on the same card (benchmarks/peers/torch_deeplab.py)
#   loop     the real loop, `tfseg --mode=train` on PNG files (benchmarks/gpu_loop.py)
#   xla      the whole step compiled at 513x513 b2, memory saving (profiled) and stock; the
#            blocks with XLA's command buffers (CUDA graphs) for every kind of thunk
#   dilated  the depthwise conv's forms alone, ASPP's and the backbone's (benchmarks/dilated.py)
#   bf16     memory saving in mixed_bfloat16, Grappler's layout optimizer on and off
#   parity   the twins' gradients against stock's, TF32 off, the grouped form's too (gpu.py)
#   largest  the largest batch at 1024x2048 under --memory_budget_gb=22, measured (report)
set -u
BUDGET=${1:-540}; START=$(date +%s); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STAGES=${2:-blocks,launches,full,torch,loop,xla,dilated,bf16,parity,largest}
STAGES=${STAGES/first/blocks,launches,full}
STAGES=${STAGES/second/torch,loop,xla,dilated,bf16,parity,largest}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
. /tmp/tfenv.sh
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
stage() {  # stage NAME CAP command...: runs the command for at most min(CAP, what is left)
  local name=$1 cap=$2; shift 2; want "$name" || return 0
  local t; t=$(left); [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 30 ]; then echo "== $name: skipped, ${t}s left" | tee -a "$OUT/stages.txt"; return; fi
  echo "== $name: up to ${t}s (at $(( $(date +%s) - START ))s)" | tee -a "$OUT/stages.txt"
  timeout -k 5 "$t" "$@" 2>&1 | grep -v '^[IW]0000' | tee -a "$OUT/log.txt" | tail -4
  echo "== $name: rc ${PIPESTATUS[0]} at $(( $(date +%s) - START ))s" | tee -a "$OUT/stages.txt"
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,power.limit --format=csv,noheader \
  | tee "$OUT/stages.txt"
stage blocks 150 python3 benchmarks/gpu.py --repeats 1 --max_minutes 2.4 --profile \
  --out_dir "$OUT/blocks" --rows '1024x2048 b1:memory_saving_blocks' '1024x2048 b1:stock_blocks' \
  '513x513 b2:memory_saving_blocks' '1024x2048 b1:memory_saving_bf16_blocks'
stage launches 100 python3 benchmarks/launches.py --size 1024 2048 --batch 1 \
  --rows blocks blocks_cached
stage full 170 python3 benchmarks/gpu.py --repeats 1 --parity --max_minutes 2.75 --profile \
  --out_dir "$OUT/full" --rows '1024x2048 b1:memory_saving' '1024x2048 b1:stock' \
  '1024x2048 b1:memory_saving_grouped'
stage torch 140 python3 benchmarks/peers/torch_deeplab.py --sizes 1024x2048x1 --steps 8 \
  --rows bf16_cl_compile bf16_cl_ckpt fp32_tf32 --no_params --out "$OUT/torch_deeplab.jsonl" \
  --max_seconds 135
# Batch norm, as gpu.py's rows have it, so that the loop/step ratio compares one step.
STEP=$(python3 -c "import json; r=[r for r in json.load(open('$OUT/full/gpu.json'))['rows'] if r['name']=='memory_saving' and r['result']]; print('fullres=%s' % r[0]['result']['step_seconds'] if r else '')" 2>/dev/null)
stage loop 110 python3 benchmarks/gpu_loop.py --out "$OUT/gpu_loop.jsonl" --max_seconds 105 \
  --flag=--norm=batch ${STEP:+--step_seconds $STEP}
# XLA at 513x513 b2, where the uncompiled step leaves the card idle most (the op-by-op
# executor) and XLA's fusion has the most to win: at 1024x2048 its compilation of the whole
# step was still running 225 s in (an H200, 2026-11-28), over the stage.
stage xla 200 python3 benchmarks/gpu.py --repeats 1 --parity --max_minutes 3.2 --profile \
  --out_dir "$OUT/xla" --rows '513x513 b2:memory_saving_xla' '513x513 b2:memory_saving' \
  '513x513 b2:stock_xla' '513x513 b2:memory_saving_blocks_cmdbuf'
stage dilated 60 python3 benchmarks/dilated.py --steps 5 --out "$OUT/dilated.jsonl"
stage bf16 90 python3 benchmarks/gpu.py --repeats 1 --max_minutes 1.4 --out_dir "$OUT/bf16" \
  --rows '1024x2048 b1:memory_saving_bf16' '1024x2048 b1:memory_saving_bf16_layout_off'
# The twins' gradients against stock's on the GPU's kernels, TF32 off, the grouped form's too.
stage parity 60 python3 benchmarks/gpu.py --repeats 1 --rows --parity float32_tf32_off \
  --out_dir "$OUT/parity"
stage largest 240 python3 main.py --mode=report --model_dir "$OUT/largest" --crop_size=1024,2048 \
  --batch_size=1 --width_multiplier=1 --middle_repeats=16 --memory_budget_gb=22 \
  --report_variants=stock,memory_saving,recompute --report_repeats=1 --report_max_minutes=3.5
cat "$OUT/stages.txt"
