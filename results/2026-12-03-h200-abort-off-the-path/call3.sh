#!/usr/bin/env bash
# NCCL's abort on a thread of its own: the GPU suites that abort (collectives, engine recovery,
# a missing peer), the PyTorch recovery's timing twice, and its CUDA kill cases.
set -u
OUT=$1 W=$1/work
mkdir -p $W
B=$PWD/dist/gpu
export PATH=/opt/gcc/bin:$PATH RTD_REQUIRE_GPU=1
(CXX=g++ python/build_ext.sh python3 $B/lib/rt_dist/python > $W/ext.log 2>&1) || { tail -20 $W/ext.log; exit 1; }
bash tests/gpu/run_all.sh $B collectives recovery peer_missing 2>&1 | tee $W/run_all.log | grep "^==\|FAIL\|PASSED"
cp /tmp/run_all_*.log $W/ 2>/dev/null
for r in 1 2; do
  TIME_ONLY=1 TIME_LAYERS=21 TIME_SIZE=4096 TIME_VARIANTS="1,1,1" \
    tests/torch/recovery.sh python3 $B/bin/dtrun cuda > $W/time$r.log 2>&1
  echo "== time $r rc=$? $(date +%T)"
  grep -h "from the kill\|recovered in generation\|joined generation\|generation 1 started" $W/time$r.log | grep -v "^  time" | sort -u
done
[ $SECONDS -lt 420 ] && { timeout 150 tests/torch/recovery.sh python3 $B/bin/dtrun cuda > $W/kill-cases.log 2>&1; echo "== kill cases rc=$? $(date +%T)"; grep -c "^ok" $W/kill-cases.log; grep FAILED $W/kill-cases.log; }
(cd $W && tar czf ../logs.tgz . ) && rm -rf $W
