#!/usr/bin/env bash
# A sixth host: the head, 1 MB alone x12 (more processes for the 1 MB mean).
set -u
b=$PWD/dist/gpu
o=$(mktemp -d /tmp/o74.XXXX)
save() { tar czf $OUT/.c6.tgz -C $o . && mv $OUT/.c6.tgz $OUT/call6.tgz; }
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
export NCCL_NVLS_ENABLE=0
M="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 1M --max-bytes 1M --iters 200 --blocks 41 --host-delay-ns 1000"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
  LD_LIBRARY_PATH=$b/lib timeout 60 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $M > $o/mb_tree_$i.txt 2>&1
  echo "== 1M tree $i: exit $? $SECONDS s"
done
save
