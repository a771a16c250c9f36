#!/usr/bin/env bash
# Covered ends: the paired small-message bench, the library before (base) and
# the tree alternating; then the C++ GPU suites and the rtd backend's
# collectives and CUDA graph tests.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nvidia-smi topo -m | head -4; nproc
xz -dk dist/base/librt_dist.so.0.xz
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for lib in base tree; do
    l=$b/lib; [ $lib != tree ] && l=$PWD/dist/$lib:$b/lib
    LD_LIBRARY_PATH=$l timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${lib}_$i.txt 2>&1
    echo "== paired $lib $i: exit $? $SECONDS s"
  done
done
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > /tmp/o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " /tmp/o/run_all.txt
grep -hE "PASSED|FAILED" /tmp/run_all_collectives*.log | sort | uniq -c
py=/opt/torch/.venv/bin/python
export RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1
timeout 90 tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python dtrun 2 collectives.py cuda > /tmp/o/torch_collectives.txt 2>&1
echo "== torch collectives: exit $?"; grep -E "checks passed|Error" /tmp/o/torch_collectives.txt | head -3
timeout 90 tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python dtrun 2 cuda_graph.py > /tmp/o/torch_cuda_graph.txt 2>&1
echo "== torch cuda_graph: exit $?"; grep -E "ok|Error" /tmp/o/torch_cuda_graph.txt | tail -2
tar czf $OUT/call3.tgz -C /tmp o
