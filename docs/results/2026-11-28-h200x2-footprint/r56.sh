#!/usr/bin/env bash
# On 2×H100: our layer's footprint cut (tree, bed718d) against the library before it (F, b66e549)
# the paired small-message bench, F and tree alternating.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nvidia-smi topo -m | head -4; nproc
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for lib in F tree; do
    l=$b/lib; [ $lib != tree ] && l=$PWD/dist/$lib:$b/lib
    LD_LIBRARY_PATH=$l timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${lib}_$i.txt 2>&1
    echo "== paired $lib $i: exit $?"
  done
done
tar czf $OUT/call7.tgz -C /tmp o
