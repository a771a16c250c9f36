#!/usr/bin/env bash
# Call 1: the GPU suites on the current tree; small messages on this host
# (paired, three processes); our layer alone; host samples of ours and raw_end.
set -u
b=$PWD/dist/gpu
export LD_LIBRARY_PATH=$b/lib:${LD_LIBRARY_PATH:-}
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/paired_$i.txt 2>&1
  echo "== paired $i: exit $?"
done
taskset -c 2 $b/bin/nccl_layer_cost --blocks 21 --calls 10000 > /tmp/o/layer_cost.txt 2>&1
cat /tmp/o/layer_cost.txt
for v in ours raw_end; do
  timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench --mode paired --ops all_reduce \
    --dtypes float32 --min-bytes 16 --max-bytes 16 --iters 1000 --blocks 101 \
    --sample-host /tmp/o/samples_$v.txt --sample-variant $v > /tmp/o/sampled_$v.txt 2>&1
  echo "== sampled $v: exit $?"; tail -3 /tmp/o/sampled_$v.txt
done
for m in $(ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /lib/x86_64-linux-gnu/libc.so.6 2>/dev/null); do
  nm -D --defined-only -n $(readlink -f $m) > /tmp/o/$(basename $m).nm 2>/dev/null
done
ldd $b/bin/collective_bench | grep -E "nccl|cuda|rt_dist" > /tmp/o/ldd.txt
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > /tmp/o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " /tmp/o/run_all.txt
tar czf $OUT/call1.tgz -C /tmp o
