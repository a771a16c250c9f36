#!/usr/bin/env bash
# The GPU machine's DDP run: the DDP tests on GPUs, the trainer, the DDP step
# benchmark over bucket sizes and reduction dtypes, and PyTorch's anchor, in one run.
#   bench/ddp_suite.sh BUNDLE_DIR OUT_DIR ANCHOR_PY
set -u
bundle=$1 out=$2 anchor=$3
bin=$bundle/bin
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
ngpu=$(nvidia-smi -L | wc -l)
dt=("$bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn)
step() {  # name, limit, command...
  local name=$1 limit=$2; shift 2
  local start=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $? in $(( $(date +%s) - start )) s"
}
step ddp_tests 180 "${dt[@]}" --nproc-per-node=$ngpu "$bin/gpu_collectives_test" --gtest_filter='DDP*:StreamOrder*'
grep -E '\[  (PASSED|FAILED) ' "$out/ddp_tests.log" | sort | uniq
step mlp_gpu 180 "${dt[@]}" --nproc-per-node=$ngpu "$bin/mlp_gpu" --steps 30
grep -E 'step|error' "$out/mlp_gpu.log" | head
step ddp_step 300 "${dt[@]}" --nproc-per-node=$ngpu "$bin/ddp_step" --bucket-mb 25,100,250 \
  --reduce fp32,bf16 --overlap-optimizer 0,1 --json "$out/ddp_step.json"
grep -vE 'dtrun node' "$out/ddp_step.log" | tail -16
ANCHOR_JSON=$out/anchor.json PYTHONUNBUFFERED=1 step torch_anchor 300 torchrun --nproc-per-node=$ngpu "$anchor"
grep -E 'step|FSDP' "$out/torch_anchor.log"
