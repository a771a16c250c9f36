#!/usr/bin/env bash
# The delayed parameter update's effect on a loss curve that falls: the CPU
# example (a student MLP imitating a fixed random teacher) on 2 ranks, ZeRO-3
# with the optimizer offloaded and stepped in backward, with the delay off and
# on, at each learning rate; prints the loss at chosen steps side by side.
# Nothing here is timed.
#   bench/delayed_update_loss.sh DTRUN MLP_CPU [STEPS] [LRS]
set -eu
dtrun=$1 mlp=$2 steps=${3:-1000} lrs=${4:-"0.003 0.01 0.03"}
at="1 10 50 100 250 500 1000 2000"
for lr in $lrs; do
  declare -A loss=()
  for delay in 0 1; do
    while read -r _ _ _ step _ value; do loss[$delay,$step]=$value; done < <(
      "$dtrun" --nproc-per-node=2 --env RTD_LOG=warn "$mlp" --shard zero3 --offload optimizer \
        --update-in-backward 1 --delayed-update $delay --steps "$steps" --lr "$lr" \
        --hidden 256 --log-every 1 2>&1 | grep "step .* loss")
  done
  echo "lr $lr: step, loss without the delay, with it, ratio"
  for s in $at; do
    [ "$s" -le "$steps" ] || continue
    a=${loss[0,$s]} b=${loss[1,$s]}
    python3 -c "print(f'  {$s:5d}  {$a:.5e}  {$b:.5e}  {$b/$a:.3f}')"
  done
  unset loss
done
