#!/usr/bin/env bash
# The GPU machine's sharding run, in one go so that the figures compare: the
# GPU tests of DDP and FSDP, the trainer with each strategy (its loss against
# DDP's), the step benchmark with every strategy beside our DDP, and
# PyTorch's anchor (DDP, ZeRO-1, FSDP2) in the same call.
#   bench/fsdp_suite.sh BUNDLE_DIR OUT_DIR ANCHOR_PY
# Logs and JSON end up in OUT_DIR/suite.tgz (one file to fetch).
set -u
bundle=$1 top=$2 anchor=$3
bin=$bundle/bin
out=$top/suite
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
ngpu=$(nvidia-smi -L | wc -l)
nvidia-smi -L
dt=("$bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn)
step() {  # name, limit, command...
  local name=$1 limit=$2; shift 2
  local start=$(date +%s.%N)
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local end=$(date +%s.%N)
  echo "$name $start $end $rc" >>"$out/steps.txt"
  echo "== $name: exit $rc in $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.0f", b-a}') s"
}
table() { grep -vE 'dtrun node|^\[rank [1-9]|NCCL INFO' "$out/$1.log" | tail -"$2"; }
trap 'tar czf "$top/suite.tgz" -C "$top" suite && rm -rf "$out"' EXIT

for n in "$ngpu" 1; do
  step gpu_tests_np$n 120 "${dt[@]}" --nproc-per-node=$n "$bin/gpu_collectives_test" \
    --gtest_filter='FSDPTest.*:DDPTest.*:PersistentReduce.*'
  grep -E '^\[rank 0\]: \[  (PASSED|FAILED|SKIPPED) |FAILED |Failure' "$out/gpu_tests_np$n.log" | head -12
done
for shard in ddp ${SHARDS:-zero1 zero2 zero3}; do
  step mlp_gpu_$shard 90 "${dt[@]}" --nproc-per-node=$ngpu "$bin/mlp_gpu" --steps 20 --shard $shard
  grep -E 'step|error|zero' "$out/mlp_gpu_$shard.log" | head -4
done
step fsdp_step 300 "${dt[@]}" --nproc-per-node=$ngpu "$bin/ddp_step" --reduce fp32,bf16 \
  --overlap-optimizer 1 --shard ${STEP_SHARDS:-zero1,zero2,zero3,zero3-keep} \
  --steps ${STEPS:-15} --rounds ${ROUNDS:-1} --json "$out/fsdp_step.json"
table fsdp_step 14
ANCHOR_JSON=$out/anchor.json PYTHONUNBUFFERED=1 step torch_anchor 240 torchrun --nproc-per-node=$ngpu "$anchor"
grep -E 'step|FSDP|zero|fsdp' "$out/torch_anchor.log"
