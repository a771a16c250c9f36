#!/usr/bin/env bash
# Call A: the hot-path A/B (7 libraries, 3 rounds), then llama-7b offloaded both ways.
set -u
O=$1
export NCCL_NVLS_ENABLE=0 RTD_REQUIRE_GPU=1
B=dist/gpu PY=python3
nvidia-smi -L > $O/a.log; free -g >> $O/a.log; lscpu | grep -E "^Model name" >> $O/a.log
t0=$(date +%s)
ROUNDS=3 bench/hot_path_ab.sh $B dist/ab /tmp/ab > /tmp/ab.summary 2>&1
cat /tmp/ab.summary >> $O/a.log
echo "A/B done in $(( $(date +%s) - t0 )) s" >> $O/a.log
tar -czf $O/ab.tgz -C /tmp ab
PATH=/opt/gcc/bin:$PATH CXX=g++ python/build_ext.sh $PY $B/lib/rt_dist/python > /tmp/ext.log 2>&1 || { echo "ext failed" >> $O/a.log; tail -30 /tmp/ext.log >> $O/a.log; exit 1; }
MODELS="llama-7b" VARIANTS="torch rtd_backward" STEPS=2 WARM=1 LIMIT=200 PY=$PY bench/torch_offload_ab.sh $B /tmp/off > /tmp/off.summary 2>&1
cat /tmp/off.summary >> $O/a.log
for f in /tmp/off/*.log; do echo "=== $f"; cat $f; done > $O/offload7b.log
dmesg 2>/dev/null | grep -i -E "out of memory|killed process" | tail -5 >> $O/a.log
free -g >> $O/a.log
echo "done in $(( $(date +%s) - t0 )) s" >> $O/a.log
