#!/usr/bin/env bash
# The stream-order GPU tests (the watchdog-thread record among them) on one
# and two ranks, and on two with every call on the communicator's stream.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o6
dt=("$b/bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn --env RTD_REQUIRE_GPU=1)
F=--gtest_filter='StreamOrder.*'
timeout 100 "${dt[@]}" --nproc-per-node=1 $b/bin/gpu_collectives_test $F > /tmp/o6/np1.txt 2>&1; echo "== np1: exit $?"
timeout 100 "${dt[@]}" --nproc-per-node=2 $b/bin/gpu_collectives_test $F > /tmp/o6/np2.txt 2>&1; echo "== np2: exit $?"
timeout 100 "${dt[@]}" --env RTD_NCCL_INLINE_BYTES=0 --nproc-per-node=2 $b/bin/gpu_collectives_test $F > /tmp/o6/commstream.txt 2>&1; echo "== commstream np2: exit $?"
grep -hE "^\[rank .\]: \[ +(OK|FAILED|SKIPPED|PASSED) " /tmp/o6/*.txt | sort | uniq -c
tar czf $OUT/call6.tgz -C /tmp o6
