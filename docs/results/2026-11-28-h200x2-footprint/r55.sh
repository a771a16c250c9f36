#!/usr/bin/env bash
# The rtd backend's GPU tests (no benchmarks) on the tree.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L | head -1
mkdir -p /tmp/o /tmp/t
t=$SECONDS
RTD_REQUIRE_GPU=1 BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t $py > /tmp/o/torch_tests.txt 2>&1
echo "== torch gpu tests: exit $? in $((SECONDS - t)) s"; cat /tmp/o/torch_tests.txt | head -60
cp /tmp/t/*.log /tmp/o/ 2>/dev/null
tar czf $OUT/call6.tgz -C /tmp o
