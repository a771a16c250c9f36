#!/usr/bin/env bash
# Call 7: small messages on another host, the base library (6430c8e) against
# the final one (3e7623e), alternating processes, four rounds.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3 4; do
  for l in base final; do
    d=$PWD/dist/base; [ $l = final ] && d=$b/lib
    LD_LIBRARY_PATH=$d:$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${l}_$i.txt 2>&1
    echo "== paired $l $i: exit $?"
  done
done
tar czf $OUT/call7.tgz -C /tmp o
