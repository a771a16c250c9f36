#!/usr/bin/env bash
# What CUDA allows around a stream capture; our collectives captured into a graph.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV) + capture test"; nvidia-smi -L | head -1
mkdir -p /tmp/o
timeout 60 dist/runs/capture_probe > /tmp/o/probe.txt 2>&1; echo "== probe: exit $?"; cat /tmp/o/probe.txt
dt=("$b/bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn --env RTD_REQUIRE_GPU=1)
F=--gtest_filter='StreamOrder.*'
for n in 1 2; do
  LD_LIBRARY_PATH=$b/lib timeout 120 "${dt[@]}" --nproc-per-node=$n $b/bin/gpu_collectives_test $F > /tmp/o/cap_np$n.txt 2>&1
  echo "== capture np$n: exit $?"; grep -E "OK|FAILED|Failure|error|Expected|Which|capture|replay" /tmp/o/cap_np$n.txt | head -30
  LD_LIBRARY_PATH=$b/lib timeout 120 "${dt[@]}" --env RTD_NCCL_INLINE_BYTES=0 --nproc-per-node=$n $b/bin/gpu_collectives_test $F > /tmp/o/cap_cs_np$n.txt 2>&1
  echo "== capture commstream np$n: exit $?"; grep -E "OK|FAILED|Failure|error|Expected|Which|capture|replay" /tmp/o/cap_cs_np$n.txt | head -30
done
tar czf $OUT/call2.tgz -C /tmp o
