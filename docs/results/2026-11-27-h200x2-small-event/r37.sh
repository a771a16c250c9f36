#!/usr/bin/env bash
# Call 9 (final tree): the collectives' GPU suites, the DDP hook's GPU test,
# and one paired small-message run.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o /tmp/t
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b collectives > /tmp/o/run_all.txt 2>&1
echo "== run_all collectives: exit $?"; grep -E "== |PASSED|FAILED" /tmp/o/run_all.txt
export NCCL_NVLS_ENABLE=0
RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1 timeout 90 tests/torch/run.sh $py $b/bin/dtrun \
  $b/lib/rt_dist/python dtrun 2 ddp_auto_hook.py cuda 1 > /tmp/o/torch_ddp_auto_hook.txt 2>&1
echo "== torch ddp_auto_hook: exit $?"; grep "all agree" /tmp/o/torch_ddp_auto_hook.txt
LD_LIBRARY_PATH=$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench --mode paired \
  --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 \
  --iters 200 --blocks 21 > /tmp/o/paired.txt 2>&1
echo "== paired: exit $?"
tar czf $OUT/call9.tgz -C /tmp o
