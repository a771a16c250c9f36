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
  losses=$(grep -o "step [0-9]* loss [0-9.e+-]*" "$work/$mode" | awk '{print $4}')
  first=$(echo "$losses" | head -1) last=$(echo "$losses" | tail -1)
  echo "info: $mode: loss $(echo $losses | tr ' ' ' ')"
  if awk -v f="$first" -v l="$last" 'BEGIN { exit !(f > 0.1 && f < 10 && l <= 0.5 * f) }'; then
    echo "ok: $mode: the loss fell from $first to $last"
  else
    echo "FAIL: $mode: the loss went from $first to $last (want a start in (0.1, 10) and at most half of it at the end)"
    fail=1
  fi
done
exit $fail
