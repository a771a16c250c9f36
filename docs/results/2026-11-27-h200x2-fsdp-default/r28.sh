#!/usr/bin/env bash
set -u
py=/opt/torch/.venv/bin/python
b=dist/gpu
mkdir -p /tmp/t
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
export NCCL_NVLS_ENABLE=0
for round in 1 2; do
t=$SECONDS
env BACKENDS="nccl rtd" CONFIGS="ddp ddp_floor_none ddp_floor_sync ddp_floor_tail_only" \
  FLOORS=0 BUSBW=0 STEPS=30 BENCH_JSON=$OUT/ddp$round.json timeout -k 5 120 $b/bin/dtrun \
  --nproc-per-node=2 --env RTD_LOG=warn $py bench/torch_backend.py > /tmp/t/ddp$round.log 2>&1
echo "== ddp$round: exit $? in $((SECONDS - t)) s"
grep -E "single-GPU|step .*eff" /tmp/t/ddp$round.log | sed 's/^\[rank 0\]: //' | cut -c1-200
done
tar czf $OUT/logs.tgz -C /tmp t
