#!/usr/bin/env bash
# Does the heap's page size move our 1 MB gap? The head, 1 MB alone, with
# glibc's malloc on transparent huge pages (GLIBC_TUNABLES
# glibc.malloc.hugetlb=1: madvise) and without, alternating, x5 each.
set -u
b=$PWD/dist/gpu
o=$(mktemp -d /tmp/o73.XXXX)
save() { tar czf $OUT/.c5.tgz -C $o . && mv $OUT/.c5.tgz $OUT/call5.tgz; }
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; ldd --version | head -1
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag
grep -i huge /proc/meminfo | head -3
export NCCL_NVLS_ENABLE=0
M="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 1M --max-bytes 1M --iters 200 --blocks 41 --host-delay-ns 1000"
for i in 1 2 3 4 5; do
  LD_LIBRARY_PATH=$b/lib timeout 60 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $M > $o/mb_small_$i.txt 2>&1
  echo "== 1M small pages $i: exit $? $SECONDS s"
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 LD_LIBRARY_PATH=$b/lib timeout 60 $b/bin/dtrun --nproc-per-node=2 --env GLIBC_TUNABLES=glibc.malloc.hugetlb=1 $b/bin/collective_bench $M > $o/mb_huge_$i.txt 2>&1
  echo "== 1M huge pages $i: exit $? $SECONDS s"
done
grep -i AnonHugePages /proc/meminfo
save
