#!/usr/bin/env bash
# Collectives captured into CUDA graphs (the C++ suites' StreamOrder tests,
# the rtd backend's cuda_graph.py); then the capture check's cost: paired
# small-message bench, the library before it (E) and the tree in turn.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV) (tree, uncommitted capture change)"; nvidia-smi -L | head -1
mkdir -p /tmp/o /tmp/t
export NCCL_NVLS_ENABLE=0
dt=("$b/bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn --env RTD_REQUIRE_GPU=1)
F=--gtest_filter='StreamOrder.*'
for n in 1 2; do
  timeout 120 "${dt[@]}" --nproc-per-node=$n $b/bin/gpu_collectives_test $F > /tmp/o/cap_np$n.txt 2>&1
  echo "== capture np$n: exit $?"; grep -E "OK \]|FAILED|Failure|exception" /tmp/o/cap_np$n.txt | head -12
done
timeout 120 "${dt[@]}" --env RTD_NCCL_INLINE_BYTES=0 --nproc-per-node=2 $b/bin/gpu_collectives_test $F > /tmp/o/cap_cs_np2.txt 2>&1
echo "== capture commstream np2: exit $?"; grep -E "OK \]|FAILED|Failure|exception" /tmp/o/cap_cs_np2.txt | head -12
RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1 timeout 150 tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python dtrun 2 cuda_graph.py > /tmp/o/torch_cuda_graph.txt 2>&1
echo "== torch cuda_graph: exit $?"; tail -8 /tmp/o/torch_cuda_graph.txt
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 4 --max-bytes 1M --factor 4 --iters 200 --blocks 21"
for i in 1 2 3; do
  for lib in E tree; do
    l=$b/lib; [ $lib = E ] && l=$PWD/dist/E:$b/lib
    LD_LIBRARY_PATH=$l timeout 120 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/ab_${lib}_$i.txt 2>&1
    echo "== paired $lib $i: exit $?"
  done
done
tar czf $OUT/call3.tgz -C /tmp o
