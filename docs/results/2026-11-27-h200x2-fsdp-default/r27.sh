#!/usr/bin/env bash
# Call 4: the rtd backend's GPU tests on the final Python; where DDP's time goes.
set -u
py=/opt/torch/.venv/bin/python
b=dist/gpu
mkdir -p /tmp/t
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
t0=$SECONDS
RTD_REQUIRE_GPU=1 BENCH=0 DEEP=0 tests/torch/gpu_run.sh $b /tmp/t $py > $OUT/tests_summary.txt 2>&1
grep -E "^== |test_train_land: FSDP2:|fsdp_features:|ddp_auto_hook: (a bucket|all)" $OUT/tests_summary.txt | cut -c1-250
echo "== torch gpu tests: $((SECONDS - t0)) s"
export NCCL_NVLS_ENABLE=0
t=$SECONDS
env BACKENDS="nccl rtd" CONFIGS="ddp ddp_floor_none ddp_floor_tail_only ddp_floor_no_tail ddp_tail_nccl" \
  FLOORS=1 BUSBW=0 STEPS=30 BENCH_JSON=$OUT/ddp.json timeout -k 5 200 $b/bin/dtrun \
  --nproc-per-node=2 --env RTD_LOG=warn $py bench/torch_backend.py > /tmp/t/ddp.log 2>&1
echo "== ddp: exit $? in $((SECONDS - t)) s"
grep -E "single-GPU|step .*eff" /tmp/t/ddp.log | sed 's/^\[rank 0\]: //' | cut -c1-200
tar czf $OUT/logs.tgz -C /tmp t
