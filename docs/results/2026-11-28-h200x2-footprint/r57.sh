#!/usr/bin/env bash
# The review's tree: the C++ GPU suites, and the rtd backend's collectives and
# CUDA graph tests.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > /tmp/o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " /tmp/o/run_all.txt
grep -hE "PASSED|FAILED" /tmp/run_all_collectives*.log | sort | uniq -c
export RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
timeout 90 tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python dtrun 2 collectives.py cuda > /tmp/o/torch_collectives.txt 2>&1
echo "== torch collectives: exit $?"; grep -E "checks passed|Error" /tmp/o/torch_collectives.txt | head -3
timeout 90 tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python dtrun 2 cuda_graph.py > /tmp/o/torch_cuda_graph.txt 2>&1
echo "== torch cuda_graph: exit $?"; grep -E "ok|Error" /tmp/o/torch_cuda_graph.txt | tail -2
tar czf $OUT/call8.tgz -C /tmp o
