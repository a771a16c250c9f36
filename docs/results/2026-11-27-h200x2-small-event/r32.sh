#!/usr/bin/env bash
# Call 4: base (6430c8e) against A (the end event through the driver, a query
# every 64th call) and B (A and the prefetches), alternating processes, three
# rounds; then the probed builds of A and B (all_reduce 16 B-64 KB).
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for l in base libA libB; do
    LD_LIBRARY_PATH=$PWD/dist/$l:$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${l}_$i.txt 2>&1
    echo "== $l $i: exit $?"
  done
done
Q="--mode paired --ops all_reduce --dtypes float32 --min-bytes 16 --max-bytes 64K --factor 4 --iters 1000 --blocks 21"
for l in probeA probeB; do
  LD_LIBRARY_PATH=$PWD/dist/$l:$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $Q > /tmp/o/$l.txt 2>&1
  echo "== $l: exit $?"; grep PROBE /tmp/o/$l.txt
done
tar czf $OUT/call4.tgz -C /tmp o
