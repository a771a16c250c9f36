#!/usr/bin/env bash
# Small messages: base (c57ab2e), R (8ff1a45: no lock on the caller's side),
# B (771fab1: R and no clock read on launch) and X (the tree: B and the hot
# path grouped), alternating processes, four rounds; then the collectives'
# GPU suites on the tree.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3 4; do
  for l in base R B X; do
    d=$b/lib; [ $l != X ] && d=$PWD/dist/$l
    LD_LIBRARY_PATH=$d:$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${l}_$i.txt 2>&1
    echo "== paired $l $i: exit $?"
  done
done
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b collectives > /tmp/o/run_all.txt 2>&1
echo "== run_all collectives: exit $? in $((SECONDS - t)) s"; grep -E "== |PASSED|FAILED" /tmp/o/run_all.txt
cp /tmp/run_all_*.log /tmp/o/ 2>/dev/null
tar czf $OUT/call2.tgz -C /tmp o
