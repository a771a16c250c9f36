#!/usr/bin/env bash
# A copy-engine collective refused inside a capture (the capture stays usable),
# with the capture tests and the persistent collectives on 2 GPUs and on the
# communicator's stream, and the rtd backend's CUDA graph test.
set -u
py=/opt/torch/.venv/bin/python
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV) (tree, uncommitted)"; nvidia-smi -L | head -1
mkdir -p /tmp/o
dt=("$b/bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn --env RTD_REQUIRE_GPU=1)
F=--gtest_filter='StreamOrder.*:Persistent*'
timeout 150 "${dt[@]}" --nproc-per-node=2 $b/bin/gpu_collectives_test $F > /tmp/o/np2.txt 2>&1
echo "== np2: exit $?"; grep -E "OK \]|FAILED|Failure|PASSED|SKIPPED \]" /tmp/o/np2.txt | grep "rank 0" | head -12
timeout 150 "${dt[@]}" --env RTD_NCCL_INLINE_BYTES=0 --nproc-per-node=2 $b/bin/gpu_collectives_test $F > /tmp/o/cs_np2.txt 2>&1
echo "== commstream np2: exit $?"; grep -E "FAILED|PASSED" /tmp/o/cs_np2.txt | head -4
RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1 timeout 120 tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python dtrun 2 cuda_graph.py > /tmp/o/torch_cuda_graph.txt 2>&1
echo "== torch cuda_graph: exit $?"; grep -E "ok|Error" /tmp/o/torch_cuda_graph.txt | tail -3
tar czf $OUT/call6.tgz -C /tmp o
