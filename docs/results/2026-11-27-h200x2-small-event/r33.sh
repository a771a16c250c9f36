#!/usr/bin/env bash
# Call 5: base (6430c8e) against A (the end event through the driver, a query
# every 64th call) and E (A and the flight recorder's next entry prefetched),
# alternating processes, four rounds; then the probed builds of each, twice.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3 4; do
  for l in base libA libE; do
    LD_LIBRARY_PATH=$PWD/dist/$l:$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${l}_$i.txt 2>&1
    echo "== $l $i: exit $?"
  done
done
Q="--mode paired --ops all_reduce --dtypes float32 --min-bytes 16 --max-bytes 64K --factor 4 --iters 1000 --blocks 21"
for i in 1 2; do
  for l in probeBase probeA probeE; do
    LD_LIBRARY_PATH=$PWD/dist/$l:$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $Q > /tmp/o/${l}_$i.txt 2>&1
    echo "== $l $i: exit $?"; grep PROBE /tmp/o/${l}_$i.txt | sed 's/all_reduces, tsc 2.100 GHz//'
  done
done
tar czf $OUT/call5.tgz -C /tmp o
