#!/usr/bin/env bash
# A third host: the head (tree) against 63aa4b4 (prev), 1 MB alone six times
# each, and two paired sweeps each.
set -u
b=$PWD/dist/gpu
o=$(mktemp -d /tmp/o67.XXXX)
echo "rev $(cat dist/runs/REV) out $o"; nvidia-smi -L; nproc
xz -dk dist/prev/librt_dist.so.0.xz
export NCCL_NVLS_ENABLE=0
M="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 1M --max-bytes 1M --iters 200 --blocks 41 --host-delay-ns 1000"
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
lib() { [ $1 = tree ] && echo $b/lib || echo $PWD/dist/$1:$b/lib; }
for i in 1 2 3 4 5 6; do
  for v in prev tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 60 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $M > $o/mb_${v}_$i.txt 2>&1
    echo "== 1M $v $i: exit $? $SECONDS s"
  done
done
for i in 1 2; do
  for v in prev tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > $o/ab_${v}_$i.txt 2>&1
    echo "== paired $v $i: exit $? $SECONDS s"
  done
done
tar czf $OUT/call4.tgz -C $o .
