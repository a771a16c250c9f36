#!/usr/bin/env bash
# Call 6: the final Python's DDP, FSDP2 and feature tests on 2 GPUs.
set -u
py=/opt/torch/.venv/bin/python
b=dist/gpu
mkdir -p /tmp/f
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
export NCCL_NVLS_ENABLE=0 RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1
run=(tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python)
for t in "ddp_auto_hook.py cuda 1" "fsdp_features.py cuda" "train.py cuda 20"; do
  s=$SECONDS
  RTD_TRAIN_H=1024 timeout 100 "${run[@]}" dtrun 2 $t > /tmp/f/${t%%.*}.log 2>&1
  echo "== $t: exit $? in $((SECONDS - s)) s"
  grep -E "(ddp_auto_hook|fsdp_features|train): |Error" /tmp/f/${t%%.*}.log | grep -v "^\[rank 1\]" | cut -c1-220
done
tar czf $OUT/logs.tgz -C /tmp f
