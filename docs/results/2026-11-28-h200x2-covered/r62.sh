#!/usr/bin/env bash
# Covered ends (tree, the review) against the library before them (base):
# the paired small-message bench, then ZeRO-3 on the deeper shape, then the
# C++ GPU suites and the rtd backend's GPU tests.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nvidia-smi topo -m | head -4; nproc
for d in base; do xz -dk dist/$d/librt_dist.so.0.xz; done
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for lib in base tree; do
    l=$b/lib; [ $lib != tree ] && l=$PWD/dist/$lib:$b/lib
    LD_LIBRARY_PATH=$l timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${lib}_$i.txt 2>&1
    echo "== paired $lib $i: exit $? $SECONDS s"
  done
done
for l in base tree; do
  d=$b/lib; [ $l != tree ] && d=$PWD/dist/$l:$b/lib
  LD_LIBRARY_PATH=$d timeout 150 $b/bin/dtrun --nproc-per-node=2 --env RTD_LOG=warn $b/bin/ddp_step --hidden 2048 --layers 48 \
    --shard zero3 --copy-engines 0,1 --reduce bf16 --steps 15 > /tmp/o/zero3_${l}.txt 2>&1
  echo "== zero3 $l: exit $?"; grep -E "^\[rank 0\]: zero3" /tmp/o/zero3_${l}.txt | cut -c1-200
done
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > /tmp/o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " /tmp/o/run_all.txt
grep -hE "PASSED|FAILED" /tmp/run_all_collectives*.log | sort | uniq -c
py=/opt/torch/.venv/bin/python
export RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1
t=$SECONDS
BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t $py > /tmp/o/torch_gpu.txt 2>&1
echo "== torch gpu_run: exit $? in $((SECONDS - t)) s"; grep -E "^== |passed|FAILED|Error" /tmp/o/torch_gpu.txt | head -30
tar czf $OUT/call5.tgz -C /tmp o
