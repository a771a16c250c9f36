#!/usr/bin/env bash
# The CPU trainer learns its task (a student network the teacher's outputs),
# on 2 workers with DDP and with ZeRO-3: the last logged loss is at most a
# quarter of the first, which is well above 0 (the student starts elsewhere).
#   tests/multiproc/mlp_cpu_loss.sh DTRUN MLP_CPU
set -u
dtrun=$1 mlp=$2
. "$(dirname "$0")/../loss_fell.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
for mode in ddp zero3; do
  flags=()
  [ $mode = zero3 ] && flags=(--shard zero3)
  timeout 120 "$dtrun" --nproc-per-node=2 --max-restarts=0 --env RTD_LOG=warn "$mlp" --steps 200 \
    --optim adamw --lr 0.01 --log-every 20 "${flags[@]}" >"$work/$mode" 2>&1 ||
    { echo "FAIL: $mode: mlp_cpu failed"; tail -20 "$work/$mode"; fail=1; continue; }
  loss_fell "$mode" "$work/$mode" 1 1e30 0.25 || fail=1
done
exit $fail
