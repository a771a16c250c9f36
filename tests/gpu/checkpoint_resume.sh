#!/usr/bin/env bash
# The GPU trainer resumes exactly (the same final weights, bit for bit; the
# printed loss is summed with atomics, so its last digits vary from run to
# run): 20 steps straight against 10 steps, a
# checkpoint, and 10 more from it (synchronous and asynchronous saves, DDP and
# ZeRO-3), and a checkpoint of one strategy resumed in another (DDP -> ZeRO-3,
# ZeRO-2 -> DDP), and inputs read through rtd::data's loader resume where they
# were. Exits 77 (skipped) without a GPU.
#   tests/gpu/checkpoint_resume.sh DTRUN MLP_GPU [NPROC=1]
set -u
dtrun=$1 mlp=$2 np=${3:-1}
. "$(dirname "$0")/lib.sh"
require_gpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
model=(--hidden 1024 --layers 4 --batch 2048 --log-every 10)
train() {  # log, mlp_gpu flags...
  local log=$1; shift
  "$dtrun" --nproc-per-node="$np" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn "$mlp" "${model[@]}" "$@" \
    >"$work/$log" 2>&1 || { echo "FAIL: mlp_gpu $* exited $?:"; tail -5 "$work/$log"; fail=1; }
}
loss_at() { grep -o "step $2 loss [^ ]*" "$work/$1" | tail -1 | awk '{ print $4 }'; }  # after dtrun's "[rank 0]: "
checksum() { grep -o "final weights checksum [0-9a-f]*" "$work/$1" | tail -1 | awk '{ print $4 }'; }
same() {  # what, log a, log b: the same final weights, bit for bit
  local a b; a=$(checksum "$2") b=$(checksum "$3")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "ok: $1 (weights checksum $a, loss $(loss_at "$3" 20))";
  else echo "FAIL: $1: final weights checksum '$a' straight, '$b' resumed"; fail=1; fi
  grep -q "resumed from step 10" "$work/$3" || { echo "FAIL: $1 did not resume from step 10"; fail=1; }
}
close() {  # what, log a, log b, relative tolerance
  local a b; a=$(loss_at "$2" 20) b=$(loss_at "$3" 20)
  if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v t="$4" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t * (a < 0 ? -a : a)) }'; then
    echo "ok: $1 (loss at step 20: $a straight, $b resumed)"
  else echo "FAIL: $1: loss at step 20 is '$a' straight, '$b' resumed"; fail=1; fi
  grep -q "resumed from step 10" "$work/$3" || { echo "FAIL: $1 did not resume from step 10"; fail=1; }
}
for shard in ddp zero3; do
  train straight_$shard --steps 20 --shard $shard
  for async in 0 1; do
    d=$work/ckpt_${shard}_$async
    train first_${shard}_$async --steps 10 --shard $shard --ckpt-dir "$d" --ckpt-every 10 --ckpt-async $async
    train resumed_${shard}_$async --steps 20 --shard $shard --ckpt-dir "$d"
    same "$shard, async $async: resumed = straight" straight_$shard resumed_${shard}_$async
  done
done
train first_zero2 --steps 10 --shard zero2 --ckpt-dir "$work/z2" --ckpt-every 10
train ddp_from_zero2 --steps 20 --shard ddp --ckpt-dir "$work/z2"
close "ZeRO-2 checkpoint resumed by DDP" straight_ddp ddp_from_zero2 1e-3
train zero3_from_ddp --steps 20 --shard zero3 --ckpt-dir "$work/ckpt_ddp_0"
close "DDP checkpoint resumed by ZeRO-3" straight_zero3 zero3_from_ddp 1e-3
# Inputs from shard files on the GPU through the loader: 2048 tokens per rank
# per step, 20480 records (10 steps an epoch on one GPU), so step 20 is in
# the second epoch.
"$mlp" "${model[@]}" --make-data "$work/data" --records 20480 >"$work/make_data" 2>&1 ||
  { echo "FAIL: --make-data"; cat "$work/make_data"; fail=1; }
train data_straight --steps 20 --shard ddp --data "$work/data"
train data_first --steps 10 --shard ddp --data "$work/data" --ckpt-dir "$work/dd" --ckpt-every 5 --ckpt-async 1
train data_resumed --steps 20 --shard ddp --data "$work/data" --ckpt-dir "$work/dd"
same "inputs through the loader: resumed = straight" data_straight data_resumed
a=$(loss_at data_straight 20) b=$(loss_at straight_ddp 20)
[ -n "$a" ] && [ "$a" != "$b" ] && echo "ok: the loader's inputs are not the fixed input ($a vs $b)" ||
  { echo "FAIL: with --data the loss is the fixed input's ($a)"; fail=1; }
[ $fail -eq 0 ] && echo "checkpoint_resume: all passed"
exit $fail
