#!/usr/bin/env bash
set -u
O=$1; B=dist/gpu
export NCCL_NVLS_ENABLE=0 RTD_REQUIRE_GPU=1
t0=$(date +%s)
ROUNDS=5 bench/hot_path_ab.sh $B dist/ab /tmp/ab > /tmp/ab.summary 2>&1; tail -8 /tmp/ab.summary > $O/c.log
tar -czf $O/ab.tgz -C /tmp ab
echo "A/B done $(( $(date +%s) - t0 )) s" >> $O/c.log
timeout 300 tests/gpu/run_all.sh $B collectives ce_shared trace recovery loss peer_missing > $O/gpu_tests.log 2>&1; echo "run_all rc=$?" >> $O/c.log
grep "^== " $O/gpu_tests.log >> $O/c.log
PATH=/opt/gcc/bin:$PATH CXX=g++ python/build_ext.sh python3 $B/lib/rt_dist/python > /tmp/ext.log 2>&1 || echo "ext failed" >> $O/c.log
tests/torch/run.sh python3 $B/bin/dtrun $B/lib/rt_dist/python one_gpu 2 groups.py cuda > $O/torch.log 2>&1; echo "groups np2 rc=$?" >> $O/c.log
PYTHONPATH=$PWD/$B/lib/rt_dist/python timeout 240 tests/torch/recovery.sh python3 $B/bin/dtrun cuda >> $O/torch.log 2>&1; echo "torch recovery cuda rc=$?" >> $O/c.log
grep -E "^ok|FAILED" $O/torch.log | head -20 >> $O/c.log
echo "done $(( $(date +%s) - t0 )) s" >> $O/c.log
