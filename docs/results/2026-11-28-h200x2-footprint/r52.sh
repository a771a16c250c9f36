#!/usr/bin/env bash
# Small messages, the tree: the paired bench (raw and ours in one process)
# three times, then --mode raw and --mode ours in separate processes,
# alternating, three times each.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nproc
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
C="--ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  LD_LIBRARY_PATH=$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench --mode paired $C > /tmp/o/paired_$i.txt 2>&1
  echo "== paired $i: exit $?"
done
for i in 1 2 3; do
  for m in raw ours; do
    LD_LIBRARY_PATH=$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench --mode $m $C > /tmp/o/sep_${m}_$i.txt 2>&1
    echo "== $m $i: exit $?"
  done
done
head -12 /tmp/o/sep_raw_1.txt
tar czf $OUT/call3.tgz -C /tmp o
