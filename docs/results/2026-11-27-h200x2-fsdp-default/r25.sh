#!/usr/bin/env bash
# Call 2: ddp_auto_hook on 2 GPUs with stacks at a hang; fsdp_features on 2 GPUs;
# the deeper shape (H=2048 L=48) with fsdp_comms's hooks by default and with
# RTD_TORCH_FSDP_COMMS=0, alternating.
set -u
py=/opt/torch/.venv/bin/python
b=dist/gpu
mkdir -p /tmp/d
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
export NCCL_NVLS_ENABLE=0 RTD_REQUIRE_GPU=1 RTD_TORCH_GPUS=2 PYTHONUNBUFFERED=1
run=(tests/torch/run.sh $py $b/bin/dtrun $b/lib/rt_dist/python)
t=$SECONDS
RTD_TEST_HANG_S=45 RTD_LOG=info timeout 80 "${run[@]}" dtrun 2 ddp_auto_hook.py cuda 1 > /tmp/d/ddp_auto_hook.log 2>&1
echo "== ddp_auto_hook: exit $? in $((SECONDS - t)) s"
grep -v "buffers reduced by copy engines" /tmp/d/ddp_auto_hook.log | grep -v "^\[rank [01]\]: *$" | tail -80 | cut -c1-400
t=$SECONDS
timeout 150 "${run[@]}" dtrun 2 fsdp_features.py cuda > /tmp/d/fsdp_features.log 2>&1
echo "== fsdp_features: exit $? in $((SECONDS - t)) s"
grep -E "fsdp_features:|Error" /tmp/d/fsdp_features.log | grep -v "^\[rank 1\]" | cut -c1-300 | head
bench() {  # name, comms setting, env...
  local name=$1 comms=$2; shift 2
  local t=$SECONDS
  env "$@" FLOORS=0 BUSBW=0 BENCH_JSON=$OUT/$name.json timeout -k 5 100 $b/bin/dtrun \
    --nproc-per-node=2 --env RTD_LOG=warn --env RTD_TORCH_FSDP_COMMS=$comms \
    $py bench/torch_backend.py > /tmp/d/$name.log 2>&1
  echo "== $name: exit $? in $((SECONDS - t)) s"
  grep -E "single-GPU|step .*eff|lent buffers" /tmp/d/$name.log | sed 's/^\[rank 0\]: //' | cut -c1-300
}
for round in 1 2; do
  bench deep_default$round 1 H=2048 L=48 BACKENDS="nccl rtd" CONFIGS="fsdp2" STEPS=10
  bench deep_off$round 0 H=2048 L=48 BACKENDS="nccl rtd" CONFIGS="fsdp2" STEPS=10
done
tar czf $OUT/logs.tgz -C /tmp d
