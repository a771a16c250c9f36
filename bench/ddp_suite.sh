#!/usr/bin/env bash
# The GPU machine's DDP run, in one go so that the figures compare: the GPU
# tests, the trainer, the DDP step benchmark (bucket sizes, reduction and
# gradient dtypes, optimizer placement, copy engines or NCCL), copy bandwidths
# between the GPUs and PyTorch's anchor, then a
# 100-step run for the clock trace. The essentials come first, in case the run
# is cut short. GPU clocks and power are sampled throughout (smi.csv;
# steps.txt says when each step ran).
#   bench/ddp_suite.sh BUNDLE_DIR OUT_DIR ANCHOR_PY
# Logs and JSON end up in OUT_DIR/suite.tgz (one file to fetch).
set -u
bundle=$1 top=$2 anchor=$3
. "$(dirname "$0")/suite_common.sh"

nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
  --format=csv,nounits -lms 100 >"$out/smi.csv" 2>/dev/null &
smi=$!
trap 'kill $smi 2>/dev/null; tar czf "$top/suite.tgz" -C "$top" suite && rm -rf "$out"' EXIT

# Two ranks first: if the copy-engine path fails there, the benchmark runs without it.
ce=0,1
for n in "$ngpu" ${NP1:-1}; do
  step gpu_tests_np$n 90 "${dt[@]}" --nproc-per-node=$n "$bin/gpu_collectives_test"
  rc=$(awk -v s=gpu_tests_np$n '$1 == s {print $4}' "$out/steps.txt" | tail -1)
  [ "$n" = "$ngpu" ] && [ "$rc" != 0 ] && ce=0
  grep -E '^\[rank 0\]: \[  (PASSED|FAILED|SKIPPED) |FAILED ' "$out/gpu_tests_np$n.log" | head -12
done
if [ "$ce" != 0 ]; then  # the trainer uses DDP's defaults, copy engines included
  step mlp_gpu 60 "${dt[@]}" --nproc-per-node=$ngpu "$bin/mlp_gpu" --steps 20
  grep -E 'step|error' "$out/mlp_gpu.log" | head -4
fi
step ddp_step 150 "${dt[@]}" --nproc-per-node=$ngpu "$bin/ddp_step" --bucket-mb 25 \
  --reduce fp32,bf16 --overlap-optimizer serial,0,1 --copy-engines $ce --json "$out/ddp_step.json"
table ddp_step 16
ANCHOR_JSON=$out/anchor.json PYTHONUNBUFFERED=1 step torch_anchor 200 torchrun --nproc-per-node=$ngpu "$anchor"
grep -E 'step|FSDP' "$out/torch_anchor.log"
step ddp_step_buckets 90 "${dt[@]}" --nproc-per-node=$ngpu "$bin/ddp_step" --bucket-mb 100,250 \
  --reduce fp32 --overlap-optimizer 1 --copy-engines $ce --json "$out/ddp_step_buckets.json"
table ddp_step_buckets 8
# The headline: 3 rounds of 50 steps, with each GPU's energy per step, and
# the reduction alone ("comm") to price its energy; the median round of each.
step ddp_step_long 150 "${dt[@]}" --nproc-per-node=$ngpu "$bin/ddp_step" --reduce fp32 \
  --overlap-optimizer 1,comm --copy-engines $ce --steps 50 --rounds 3 --json "$out/ddp_step_long.json"
table ddp_step_long 7
# bf16 gradients (DDP's grad_dtype) against fp32, each against its own one-GPU step.
step ddp_step_bf16_grads 150 "${dt[@]}" --nproc-per-node=$ngpu "$bin/ddp_step" --grads fp32,bf16 \
  --reduce fp32,bf16 --overlap-optimizer 1,comm --copy-engines $ce --steps 30 --rounds 3 \
  --json "$out/ddp_step_bf16_grads.json"
table ddp_step_bf16_grads 14
# Bytes per second between the GPUs by copy engine and by kernel, per pattern.
step ce_bandwidth 60 "$bin/ce_bandwidth" --json "$out/ce_bandwidth.json"
table ce_bandwidth 12
for blocks in ${CE_BLOCKS:-}; do  # the copy-engine addition's grid (RTD_CE_REDUCE_BLOCKS)
  step ddp_step_blocks_$blocks 90 "${dt[@]}" --env RTD_CE_REDUCE_BLOCKS=$blocks \
    --nproc-per-node=$ngpu "$bin/ddp_step" --reduce fp32 --overlap-optimizer 1 --copy-engines 1 \
    --steps 50 --rounds 3 --json "$out/ddp_step_blocks_$blocks.json"
  table ddp_step_blocks_$blocks 4
done
