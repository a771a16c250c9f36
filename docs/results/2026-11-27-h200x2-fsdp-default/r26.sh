#!/usr/bin/env bash
# Call 3: ddp_auto_hook and fsdp_features on 2 GPUs (the fixes), then where
# DDP's time over its floor goes on rtd (twice).
set -u
py=/opt/torch/.venv/bin/python
b=dist/gpu
mkdir -p /tmp/e
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
export NCCL_NVLS_ENABLE=0 RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1
run=(tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python)
t=$SECONDS
RTD_TEST_HANG_S=60 timeout 90 "${run[@]}" dtrun 2 ddp_auto_hook.py cuda 1 > /tmp/e/ddp_auto_hook.log 2>&1
echo "== ddp_auto_hook: exit $? in $((SECONDS - t)) s"
grep -E "ddp_auto_hook: [^r]|Error|Timeout" /tmp/e/ddp_auto_hook.log | grep -v "^\[rank 1\]" | cut -c1-300
t=$SECONDS
timeout 150 "${run[@]}" dtrun 2 fsdp_features.py cuda > /tmp/e/fsdp_features.log 2>&1
echo "== fsdp_features: exit $? in $((SECONDS - t)) s"
grep -E "fsdp_features:|Error" /tmp/e/fsdp_features.log | grep -v "^\[rank 1\]" | cut -c1-300 | head
for round in 1 2; do
  t=$SECONDS
  env BACKENDS="nccl rtd" CONFIGS="ddp ddp_tail_nccl ddp_floor_tail_only ddp_floor_no_tail" \
    FLOORS=1 BUSBW=0 STEPS=30 BENCH_JSON=$OUT/ddp$round.json timeout -k 5 200 $b/bin/dtrun \
    --nproc-per-node=2 --env RTD_LOG=warn $py bench/torch_backend.py > /tmp/e/ddp$round.log 2>&1
  echo "== ddp$round: exit $? in $((SECONDS - t)) s"
  grep -E "single-GPU|step .*eff" /tmp/e/ddp$round.log | sed 's/^\[rank 0\]: //' | cut -c1-200
done
tar czf $OUT/logs.tgz -C /tmp e
