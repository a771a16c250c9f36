#!/usr/bin/env bash
# Call 2: where a call's host time goes inside our layer, in place (a
# diagnostic build of the library with rdtsc probes in launch(); the patch is
# layer_probe.patch), all_reduce 16 B-64 KB, two processes; then the same rows
# with the plain library.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce --dtypes float32 --min-bytes 16 --max-bytes 64K --factor 4 --iters 1000 --blocks 21"
for i in 1 2; do :
  LD_LIBRARY_PATH=$PWD/dist/probe:$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/probe_$i.txt 2>&1
  echo "== probe $i: exit $?"; grep PROBE /tmp/o/probe_$i.txt
done
tar czf $OUT/call3.tgz -C /tmp o
