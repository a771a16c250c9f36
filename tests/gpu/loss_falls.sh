#!/usr/bin/env bash
# The GPU trainer learns its task (the layers reproduce the GELU of their
# input): on one GPU, with DDP and with ZeRO-3 whose AdamW steps in host
# memory, the loss of the last logged window is at most half the first's,
# from a first window near 1 (a start the task sets, not a collapse to 0).
# Exits 77 (skipped) without a GPU.
#   tests/gpu/loss_falls.sh DTRUN MLP_GPU
set -u
dtrun=$1 mlp=$2
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../loss_fell.sh"
require_gpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
model=(--hidden 1024 --layers 8 --batch 4096 --steps 200 --log-every 20)
for mode in ddp offload; do
  flags=()
  [ $mode = offload ] && flags=(--shard zero3 --offload optimizer)
  "$dtrun" --nproc-per-node=1 --env RTD_LOG=warn --env NCCL_NVLS_ENABLE=0 "$mlp" "${model[@]}" \
    "${flags[@]}" >"$work/$mode" 2>&1 || { echo "FAIL: $mode: mlp_gpu failed"; tail -20 "$work/$mode"; fail=1; continue; }
  loss_fell "$mode" "$work/$mode" 0.1 10 0.5 || fail=1
done
exit $fail
