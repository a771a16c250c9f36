#!/usr/bin/env bash
# The tree after the review: the whole GPU suites and the rtd backend's GPU tests.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o /tmp/t
export NCCL_NVLS_ENABLE=0
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > /tmp/o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " /tmp/o/run_all.txt
grep -hE "PASSED|FAILED" /tmp/run_all_collectives*.log | sort | uniq -c
t=$SECONDS
RTD_REQUIRE_GPU=1 BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t $py > /tmp/o/torch_tests.txt 2>&1
echo "== torch gpu tests: exit $? in $((SECONDS - t)) s"; grep -E "^== " /tmp/o/torch_tests.txt | head -30
tar czf $OUT/call5.tgz -C /tmp o
