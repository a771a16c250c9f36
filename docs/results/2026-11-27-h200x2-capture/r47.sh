#!/usr/bin/env bash
# The capture check on the caller's thread after NCCL's call: its cost
# (paired bench, the library before it (E) and the tree in turn), the rtd
# backend's CUDA graph test, then the whole GPU suites and the rtd backend's
# GPU tests.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV) (tree, uncommitted capture change)"; nvidia-smi -L | head -1
mkdir -p /tmp/o /tmp/t
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for lib in E tree; do
    l=$b/lib; [ $lib = E ] && l=$PWD/dist/E:$b/lib
    LD_LIBRARY_PATH=$l timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${lib}_$i.txt 2>&1
    echo "== paired $lib $i: exit $?"
  done
done
RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1 timeout 150 tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python dtrun 2 cuda_graph.py > /tmp/o/torch_cuda_graph.txt 2>&1
echo "== torch cuda_graph: exit $?"; grep -E "ok|Error|warning" /tmp/o/torch_cuda_graph.txt | tail -4
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > /tmp/o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " /tmp/o/run_all.txt
grep -hE "PASSED|FAILED" /tmp/run_all_collectives*.log | sort | uniq -c
grep -h "Captured" /tmp/run_all_collectives*.log | sort | uniq -c
cp /tmp/run_all_collectives*.log /tmp/o/ 2>/dev/null
t=$SECONDS
RTD_REQUIRE_GPU=1 BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t $py > /tmp/o/torch_tests.txt 2>&1
echo "== torch gpu tests: exit $? in $((SECONDS - t)) s"; grep -E "^== " /tmp/o/torch_tests.txt | head -30
tar czf $OUT/call5.tgz -C /tmp o
