#!/usr/bin/env bash
# Call 8: host profiles by elapsed time (--sample-clock wall, 5,000 a second)
# of ours and of raw_end, all_reduce 16 B, on the final library.
set -u
b=$PWD/dist/gpu
export LD_LIBRARY_PATH=$b/lib
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
for v in ours raw_end; do
  timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench --mode paired --ops all_reduce \
    --dtypes float32 --min-bytes 16 --max-bytes 16 --iters 1000 --blocks 41 --sample-clock wall \
    --sample-host /tmp/o/samples_$v.txt --sample-variant $v > /tmp/o/sampled_$v.txt 2>&1
  echo "== sampled $v: exit $?"; grep -E "samples|all_reduce/" /tmp/o/sampled_$v.txt
done
for m in libcuda.so.1 libc.so.6; do
  p=$(ldconfig -p | grep -m1 "$m " | sed 's/.*=> //')
  [ -n "$p" ] && nm -D --defined-only -n "$(readlink -f $p)" > /tmp/o/$m.nm 2>/dev/null
done
ls -la /tmp/o
tar czf $OUT/call8.tgz -C /tmp o
