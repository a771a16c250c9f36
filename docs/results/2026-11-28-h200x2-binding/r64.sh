#!/usr/bin/env bash
# The head's GPU suites (C++ and the rtd backend), then where 1 MB's ours - raw
# comes from: the host's slack (raw_delay: 1 us of host work a call), raw
# calls on our communicator's own NCCL handle, and kEndCovers 32 (k32).
set -u
b=$PWD/dist/gpu
o=$(mktemp -d /tmp/o64.XXXX)
echo "rev $(cat dist/runs/REV) out $o"; nvidia-smi -L; nproc
xz -dk dist/k32/librt_dist.so.0.xz
export NCCL_NVLS_ENABLE=0
M="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 1M --max-bytes 1M --iters 200 --blocks 41 --host-delay-ns 1000"
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for v in tree handle k32; do
    l=$b/lib; x=; [ $v = k32 ] && l=$PWD/dist/k32:$b/lib; [ $v = handle ] && x="--raw-init ours"
    LD_LIBRARY_PATH=$l timeout 60 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $M $x > $o/mb_${v}_$i.txt 2>&1
    echo "== 1M $v $i: exit $? $SECONDS s"
  done
done
for i in 1 2; do
  for v in tree k32; do
    l=$b/lib; [ $v = k32 ] && l=$PWD/dist/k32:$b/lib
    LD_LIBRARY_PATH=$l timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > $o/ab_${v}_$i.txt 2>&1
    echo "== paired $v $i: exit $? $SECONDS s"
  done
done
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > $o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " $o/run_all.txt
py=/opt/torch/.venv/bin/python
export RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1
t=$SECONDS
BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b $o/t $py > $o/torch_gpu.txt 2>&1
echo "== torch gpu_run: exit $? in $((SECONDS - t)) s"; grep -E "^== |passed|FAILED|Error" $o/torch_gpu.txt | head -30
tar czf $OUT/call1.tgz -C $o .
