#!/usr/bin/env bash
# Our layer's host cost on this host's CPU with NCCL and CUDA stood in
# (nccl_layer_cost), the caches as NCCL's call leaves them at several sizes
# of eviction (0 and 48 KB walked before each stand-in call), for
# the head (tree) and d4b8440 (d4b); then 1 MB alone x4 each on the GPUs.
set -u
b=$PWD/dist/gpu
o=$(mktemp -d /tmp/o72.XXXX)
save() { tar czf $OUT/.c4.tgz -C $o . && mv $OUT/.c4.tgz $OUT/call4.tgz; }
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nproc; lscpu | grep -E "Model name|L1d|L1i|L2|L3"
xz -dk dist/d4b/librt_dist.so.0.xz
lib() { [ $1 = tree ] && echo $b/lib || echo $PWD/dist/$1:$b/lib; }
for e in 0 48; do
  c=4000
  for v in d4b tree d4b tree; do
    LD_LIBRARY_PATH=$(lib $v) taskset -c 2 timeout 60 dist/runs/nccl_layer_cost --calls $c --blocks 5 --evict $e >> $o/cost_${v}_$e.txt 2>&1
    echo "== cost $v evict $e: exit $? $SECONDS s"
  done
done
save
export NCCL_NVLS_ENABLE=0
M="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 1M --max-bytes 1M --iters 200 --blocks 41 --host-delay-ns 1000"
for i in 1 2 3 4; do
  for v in d4b tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 60 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $M > $o/mb_${v}_$i.txt 2>&1
    echo "== 1M $v $i: exit $? $SECONDS s"
  done
done
save
