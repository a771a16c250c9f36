#!/usr/bin/env bash
# Call B: the extension, split/shrink on CUDA, start-up, offload llama-6b.
set -u
O=$1
export NCCL_NVLS_ENABLE=0 RTD_REQUIRE_GPU=1
B=dist/gpu PY=python3
git log -1 --format=%h > $O/b.log 2>/dev/null; nvidia-smi -L >> $O/b.log; free -g >> $O/b.log; nproc >> $O/b.log
t0=$(date +%s)
PATH=/opt/gcc/bin:$PATH CXX=g++ python/build_ext.sh $PY $B/lib/rt_dist/python > $O/ext.log 2>&1 || { echo "ext failed" >> $O/b.log; tail -30 $O/ext.log >> $O/b.log; exit 1; }
echo "ext built in $(( $(date +%s) - t0 )) s" >> $O/b.log
for n in 2 3; do
  tests/torch/run.sh $PY $B/bin/dtrun $B/lib/rt_dist/python one_gpu $n groups.py cuda > $O/groups.np$n.log 2>&1
  echo "groups one_gpu np$n rc=$? $(grep -c 'checks passed' $O/groups.np$n.log) ranks passed" >> $O/b.log
done
cat $O/groups.np2.log $O/groups.np3.log > $O/groups.log; rm $O/groups.np2.log $O/groups.np3.log
$PY bench/launch_to_first_all_reduce.py $B/bin/dtrun 1 3 > $O/launch.log 2>&1; echo "launch rc=$?" >> $O/b.log
MODES="raw ours" bench/startup_time.sh $B/bin/dtrun $B/bin/collective_bench 1 3 >> $O/launch.log 2>&1; echo "startup rc=$?" >> $O/b.log
grep -E "SUMMARY|^raw|^ours" $O/launch.log >> $O/b.log
MODELS="llama-6b" VARIANTS="torch rtd_backward" STEPS=2 WARM=1 LIMIT=230 PY=$PY bench/torch_offload_ab.sh $B /tmp/off > /tmp/off.summary 2>&1
cat /tmp/off.summary >> $O/b.log
for f in /tmp/off/*.log; do echo "=== $f"; cat $f; done > $O/offload.log
free -g >> $O/b.log
echo "done in $(( $(date +%s) - t0 )) s" >> $O/b.log
