#!/usr/bin/env bash
# Call 6 (final tree): the C++ GPU suites and the rtd backend's GPU tests;
# small messages, the base library (6430c8e) against the final one,
# alternating processes, three rounds; ZeRO-3 on the deeper shape, both.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o /tmp/t
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for l in base final; do
    d=$PWD/dist/base; [ $l = final ] && d=$b/lib
    LD_LIBRARY_PATH=$d:$b/lib timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${l}_$i.txt 2>&1
    echo "== paired $l $i: exit $?"
  done
done
for i in 1 2; do
  for l in base final; do
    d=$PWD/dist/base; [ $l = final ] && d=$b/lib
    LD_LIBRARY_PATH=$d:$b/lib timeout 150 $b/bin/dtrun --nproc-per-node=2 --env RTD_LOG=warn $b/bin/ddp_step --hidden 2048 --layers 48 \
      --shard zero3 --copy-engines 0,1 --reduce bf16 --steps 15 > /tmp/o/zero3_${l}_$i.txt 2>&1
    echo "== zero3 $l $i: exit $?"; grep -iE "zero3|step" /tmp/o/zero3_${l}_$i.txt | grep -v info | tail -4
  done
done
t=$SECONDS
RTD_REQUIRE_GPU=1 tests/gpu/run_all.sh $b > /tmp/o/run_all.txt 2>&1
echo "== run_all: exit $? in $((SECONDS - t)) s"; grep "== " /tmp/o/run_all.txt
grep -E "SmallCall|PASSED|FAILED" /tmp/run_all_collectives_np2.log | head -5
t=$SECONDS
RTD_REQUIRE_GPU=1 BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t $py > /tmp/o/torch_tests.txt 2>&1
echo "== torch gpu tests: exit $? in $((SECONDS - t)) s"; grep -E "^== " /tmp/o/torch_tests.txt | head -30
cp /tmp/run_all_*.log /tmp/o/ 2>/dev/null
tar czf $OUT/call6.tgz -C /tmp o
