#!/usr/bin/env bash
# Where the processes run: the host's CPUs and NUMA nodes, and the paired
# small-message bench unbound, bound near each rank's GPU, and far from it.
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
{ lscpu; echo; lscpu -e; echo; nvidia-smi topo -m; echo; ls /sys/devices/system/node/;
  for d in /sys/devices/system/node/node*; do echo "$d $(cat $d/cpulist)"; done;
  cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1; which numactl taskset; } > /tmp/o/host.txt 2>&1
head -30 /tmp/o/host.txt; grep -A4 "GPU0" /tmp/o/host.txt | head -8
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for m in none near far; do
    LD_LIBRARY_PATH=$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 dist/runs/bind.sh $m $b/bin/collective_bench $P > /tmp/o/bind_${m}_$i.txt 2>&1
    echo "== paired $m $i: exit $?"
  done
done
grep -h "bind:" /tmp/o/bind_*_1.txt
tar czf $OUT/call1.tgz -C /tmp o
