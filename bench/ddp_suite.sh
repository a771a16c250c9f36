#!/usr/bin/env bash
# The GPU machine's DDP run, in one go so that the figures compare: the GPU
# tests, the trainer, the DDP step benchmark (bucket sizes, reduction dtypes,
# optimizer placement, registered buckets, NCCL's CTA policies) and PyTorch's
# anchor. The essentials come first, in case the run is cut short. GPU clocks
# and power are sampled throughout (smi.csv; steps.txt says when each step ran).
#   bench/ddp_suite.sh BUNDLE_DIR OUT_DIR ANCHOR_PY
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

nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
  --format=csv,nounits -lms 100 >"$out/smi.csv" 2>/dev/null &
smi=$!
trap 'kill $smi 2>/dev/null; tar czf "$top/suite.tgz" -C "$top" suite && rm -rf "$out"' EXIT

for n in 1 "$ngpu"; do
  step gpu_tests_np$n 120 "${dt[@]}" --nproc-per-node=$n "$bin/gpu_collectives_test"
  grep -E '^\[rank 0\]: \[  (PASSED|FAILED|SKIPPED) |FAILED ' "$out/gpu_tests_np$n.log" | head -12
done
step mlp_gpu 60 "${dt[@]}" --nproc-per-node=$ngpu "$bin/mlp_gpu" --steps 20
grep -E 'step|error' "$out/mlp_gpu.log" | head -4
# NCCL's own log of this run says how many channels it uses and what it registered.
step ddp_step 180 "${dt[@]}" --env NCCL_DEBUG=INFO --env NCCL_DEBUG_SUBSYS=INIT,REG \
  --nproc-per-node=$ngpu "$bin/ddp_step" --bucket-mb 25 \
  --reduce fp32,bf16 --overlap-optimizer serial,0,1 --register 0,1 --json "$out/ddp_step.json"
table ddp_step 16
ANCHOR_JSON=$out/anchor.json PYTHONUNBUFFERED=1 step torch_anchor 200 torchrun --nproc-per-node=$ngpu "$anchor"
grep -E 'step|FSDP' "$out/torch_anchor.log"
step ddp_step_buckets 90 "${dt[@]}" --nproc-per-node=$ngpu "$bin/ddp_step" --bucket-mb 100,250 \
  --reduce fp32 --overlap-optimizer 1 --register 0,1 --json "$out/ddp_step_buckets.json"
table ddp_step_buckets 8
for policy in efficiency zero; do
  step ddp_step_cta_$policy 90 "${dt[@]}" --env RTD_NCCL_CTA_POLICY=$policy --nproc-per-node=$ngpu \
    "$bin/ddp_step" --bucket-mb 25 --reduce fp32 --overlap-optimizer serial,1 --register 0,1 \
    --json "$out/ddp_step_cta_$policy.json"
  table ddp_step_cta_$policy 8
done
