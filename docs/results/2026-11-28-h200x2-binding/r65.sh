#!/usr/bin/env bash
# The library bound to its own functions, the flight recorder's stamp and the
# staged test inline (tree) against the library before them (prev, 63aa4b4):
# paired sweeps, 1 MB alone (with 1 us of host work a call: raw_delay), ZeRO-3
# on the deeper shape, then the C++ GPU suites on the tree.
set -u
b=$PWD/dist/gpu
o=$(mktemp -d /tmp/o65.XXXX)
echo "rev $(cat dist/runs/REV) out $o"; nvidia-smi -L; nproc
xz -dk dist/prev/librt_dist.so.0.xz
export NCCL_NVLS_ENABLE=0
M="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 1M --max-bytes 1M --iters 200 --blocks 41 --host-delay-ns 1000"
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
lib() { [ $1 = tree ] && echo $b/lib || echo $PWD/dist/$1:$b/lib; }
for i in 1 2 3; do
  for v in prev tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > $o/ab_${v}_$i.txt 2>&1
    echo "== paired $v $i: exit $? $SECONDS s"
  done
done
for i in 1 2 3 4; do
  for v in prev tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 60 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $M > $o/mb_${v}_$i.txt 2>&1
    echo "== 1M $v $i: exit $? $SECONDS s"
  done
done
for v in prev tree; do
  LD_LIBRARY_PATH=$(lib $v) timeout 150 $b/bin/dtrun --nproc-per-node=2 --env RTD_LOG=warn $b/bin/ddp_step --hidden 2048 --layers 48 \
    --shard zero3 --copy-engines 0,1 --reduce bf16 --steps 15 > $o/zero3_${v}.txt 2>&1
  echo "== zero3 $v: exit $?"; grep -E "^\[rank 0\]: zero3" $o/zero3_${v}.txt | cut -c1-200
done
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > $o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " $o/run_all.txt
tar czf $OUT/call2.tgz -C $o .
