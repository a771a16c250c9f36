#!/usr/bin/env bash
# Another host: the head (tree) against d4b8440 (d4b), 1 MB alone and paired
# sweeps; then the rtd backend's GPU tests on the head.
set -u
b=$PWD/dist/gpu
o=$(mktemp -d /tmp/o71.XXXX)
save() { tar czf $OUT/.c3.tgz -C $o . && mv $OUT/.c3.tgz $OUT/call3.tgz; }
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nproc
xz -dk dist/d4b/librt_dist.so.0.xz
export NCCL_NVLS_ENABLE=0
M="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 1M --max-bytes 1M --iters 200 --blocks 41 --host-delay-ns 1000"
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
lib() { [ $1 = tree ] && echo $b/lib || echo $PWD/dist/$1:$b/lib; }
for i in 1 2 3 4 5 6; do
  for v in d4b tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 60 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $M > $o/mb_${v}_$i.txt 2>&1
    echo "== 1M $v $i: exit $? $SECONDS s"
  done
done
for i in 1 2; do
  for v in d4b tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > $o/ab_${v}_$i.txt 2>&1
    echo "== paired $v $i: exit $? $SECONDS s"
  done
done
save
py=/opt/torch/.venv/bin/python
export RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1
t=$SECONDS
BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t71 $py > $o/torch_gpu.txt 2>&1
echo "== torch gpu_run: exit $? in $((SECONDS - t)) s"; grep -E "^== |passed|FAILED|Error" $o/torch_gpu.txt | head -30
save
