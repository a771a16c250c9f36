#!/usr/bin/env bash
# The tree: what a host delay of 250 and 500 ns costs a small call (row
# raw_delay) beside ours, three rounds each; then the whole GPU suites and
# the rtd backend's GPU tests.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o /tmp/t
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for d in 250 500; do
    LD_LIBRARY_PATH=$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P --host-delay-ns $d > /tmp/o/delay${d}_$i.txt 2>&1
    echo "== paired delay $d $i: exit $?"
  done
done
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > /tmp/o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " /tmp/o/run_all.txt
t=$SECONDS
RTD_REQUIRE_GPU=1 BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t $py > /tmp/o/torch_tests.txt 2>&1
echo "== torch gpu tests: exit $? in $((SECONDS - t)) s"; grep -E "^== " /tmp/o/torch_tests.txt | head -30
cp /tmp/run_all_*.log /tmp/o/ 2>/dev/null
tar czf $OUT/call3.tgz -C /tmp o
