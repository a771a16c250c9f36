#!/usr/bin/env bash
# Call 1: the torch GPU tests (fsdp_features included), then the anchor table with floors.
set -u
py=/opt/torch/.venv/bin/python
b=dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nvidia-smi topo -m | head -4
t0=$SECONDS
RTD_REQUIRE_GPU=1 BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t $py > $OUT/tests_summary.txt 2>&1
cat $OUT/tests_summary.txt
echo "== torch gpu tests: $((SECONDS - t0)) s"
export NCCL_NVLS_ENABLE=0
t=$SECONDS
env BACKENDS="nccl rtd" CONFIGS="ddp fsdp2 fsdp2_noreshard_bf16" FLOORS=1 BUSBW=0 STEPS=30 \
  BENCH_JSON=$OUT/table.json timeout -k 5 240 $b/bin/dtrun --nproc-per-node=2 \
  --env RTD_LOG=warn $py bench/torch_backend.py > /tmp/t/table.log 2>&1
echo "== table: exit $? in $((SECONDS - t)) s"
grep -E "single-GPU|step .*eff|comm hooks|lent buffers" /tmp/t/table.log | sed 's/^\[rank 0\]: //' | cut -c1-300 | head -60
tar czf $OUT/logs.tgz -C /tmp t
