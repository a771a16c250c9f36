#!/usr/bin/env bash
# The GPU machine's sharding run, in one go so that the figures compare: the
# GPU tests of DDP and FSDP, the trainer with each strategy (its loss against
# DDP's), the step benchmark with every strategy beside our DDP, and
# PyTorch's anchor (DDP, ZeRO-1, FSDP2) in the same call.
#   bench/fsdp_suite.sh BUNDLE_DIR OUT_DIR ANCHOR_PY
# Logs and JSON end up in OUT_DIR/suite.tgz (one file to fetch).
set -u
bundle=$1 top=$2 anchor=$3
. "$(dirname "$0")/suite_common.sh"
trap 'tar czf "$top/suite.tgz" -C "$top" suite && rm -rf "$out"' EXIT

for n in "$ngpu" 1; do
  step gpu_tests_np$n 120 "${dt[@]}" --nproc-per-node=$n "$bin/gpu_collectives_test" \
    --gtest_filter='FSDPTest.*:DDPTest.*:Persistent*'
  grep -E '^\[rank 0\]: \[  (PASSED|FAILED|SKIPPED) |FAILED |Failure' "$out/gpu_tests_np$n.log" | head -12
done
for shard in ddp ${SHARDS:-zero1 zero2 zero3}; do
  step mlp_gpu_$shard 90 "${dt[@]}" --nproc-per-node=$ngpu "$bin/mlp_gpu" --steps 20 --shard $shard
  grep -E 'step|error|zero' "$out/mlp_gpu_$shard.log" | head -4
done
step mlp_gpu_zero3_fp16 90 "${dt[@]}" --nproc-per-node=$ngpu "$bin/mlp_gpu" --steps 20 \
  --shard zero3 --fp16 1
grep -E 'step|error|zero|scale' "$out/mlp_gpu_zero3_fp16.log" | head -5
step fsdp_step 300 "${dt[@]}" --nproc-per-node=$ngpu "$bin/ddp_step" --reduce fp32,bf16 \
  --overlap-optimizer 1 --copy-engines ${CE:-1} --update-in-backward ${UB:-0,1} --fp16 ${FP16:-0,1} --shard ${STEP_SHARDS:-zero1,zero2,zero3,zero3-keep} \
  --steps ${STEPS:-15} --rounds ${ROUNDS:-1} --json "$out/fsdp_step.json"
table fsdp_step ${TABLE_ROWS:-40}
ANCHOR_JSON=$out/anchor.json PYTHONUNBUFFERED=1 step torch_anchor 240 torchrun --nproc-per-node=$ngpu "$anchor"
grep -E 'step|FSDP|zero|fsdp' "$out/torch_anchor.log"
