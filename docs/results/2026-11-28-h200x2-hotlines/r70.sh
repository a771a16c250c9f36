#!/usr/bin/env bash
# The head (tree: launch's paths out of line, dtype_size, the Work in two
# lines, hot functions line-aligned) against d4b8440 (d4b) and dcc67c2 (dcc):
# 1 MB alone x6, paired sweeps x3 (d4b, tree), ZeRO-3 deep; then the C++ GPU
# suites on the head.
set -u
b=$PWD/dist/gpu
o=$(mktemp -d /tmp/o70.XXXX)
save() { tar czf $OUT/.c2.tgz -C $o . && mv $OUT/.c2.tgz $OUT/call2.tgz; }
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nproc
xz -dk dist/dcc/librt_dist.so.0.xz dist/d4b/librt_dist.so.0.xz
export NCCL_NVLS_ENABLE=0
M="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 1M --max-bytes 1M --iters 200 --blocks 41 --host-delay-ns 1000"
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
lib() { [ $1 = tree ] && echo $b/lib || echo $PWD/dist/$1:$b/lib; }
for i in 1 2 3 4 5 6; do
  for v in dcc d4b tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 60 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $M > $o/mb_${v}_$i.txt 2>&1
    echo "== 1M $v $i: exit $? $SECONDS s"
  done
done
save
for i in 1 2 3; do
  for v in d4b tree; do
    LD_LIBRARY_PATH=$(lib $v) timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > $o/ab_${v}_$i.txt 2>&1
    echo "== paired $v $i: exit $? $SECONDS s"
  done
done
save
for v in d4b tree; do
  LD_LIBRARY_PATH=$(lib $v) timeout 150 $b/bin/dtrun --nproc-per-node=2 --env RTD_LOG=warn $b/bin/ddp_step --hidden 2048 --layers 48 \
    --shard zero3 --copy-engines 0,1 --reduce bf16 --steps 15 > $o/zero3_${v}.txt 2>&1
  echo "== zero3 $v: exit $? $SECONDS s"; grep -E "^\[rank 0\]: zero3" $o/zero3_${v}.txt | cut -c1-200
done
save
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > $o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " $o/run_all.txt
save
