#!/usr/bin/env bash
# Exact resume of the CPU trainer (DDP) from its checkpoints:
#  1. killed (SIGKILL of a worker) at a random step under dtrun --max-restarts=1,
#     it finishes with the same weights, bit for bit, as a run never killed;
#  2. checkpointed on 4 ranks, it resumes on 2 and on 3 with the same global
#     batch, and its loss continues (the same numbers to 1e-5);
#  3. a corrupted latest checkpoint is named, and the one before is resumed;
#  4. ZeRO-3 shards (weights and AdamW's moments) saved on 4 ranks resume as
#     ZeRO-1 on 2 ranks and ZeRO-2 on 3, the loss continuing; and across DDP
#     (with AdamW) and ZeRO: DDP on 4 -> ZeRO-3 on 2, ZeRO-3 on 4 -> DDP on 3;
#  5. reading its inputs from shard files through rtd::data's loader, the
#     data position resumes with the weights: the same weights after a kill,
#     the loss continuing on 2 ranks after 4;
#  6. with background saves, a worker SIGKILLed while one is being written
#     leaves the checkpoint before whole: resumed from it, the same weights.
#   tests/checkpoint/resume.sh DTRUN MLP_CPU
set -u
dtrun=$1 mlp=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
train() {  # ranks, log, args...
  local n=$1 log=$2; shift 2
  "$dtrun" --nproc-per-node=$n --max-restarts=1 --env RTD_LOG=warn "$mlp" --log-every 10 "$@" \
    >"$log" 2>&1 || { echo "FAILED: dtrun exited $? ($log)"; cat "$log"; fail=1; }
}
value() { grep -o "$1 [^ ]*" "$2" | tail -1 | awk '{print $NF}'; }
close_to() {  # name, a, b: relative difference within 1e-5
  if [ -n "$2" ] && [ -n "$3" ] && awk -v a="$2" -v b="$3" \
       'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= 1e-5 * m) }'; then
    echo "ok: $1 ($2 vs $3)"
  else
    echo "FAILED: $1 ($2 vs $3)"; fail=1
  fi
}

# 1. Killed at a random step.
kill_at=$((6 + RANDOM % 50))  # after the first checkpoint (step 5)
train 4 "$out/ref" --steps 60 --batch 3
train 4 "$out/killed" --steps 60 --batch 3 --ckpt-dir "$out/c1" --ckpt-every 5 --kill-at-step $kill_at
ref=$(value "final weights fnv1a" "$out/ref")
got=$(value "final weights fnv1a" "$out/killed")
resumed=$(value "resumed from step" "$out/killed")
if [ -n "$ref" ] && [ "$ref" = "$got" ] && [ -n "$resumed" ]; then
  echo "ok: killed at step $kill_at, resumed from step $resumed: the same weights ($got)"
else
  echo "FAILED: killed at step $kill_at: weights $got (resumed from '$resumed') vs $ref"
  tail -n 20 "$out/killed"; fail=1
fi

# 2. Saved on 4 ranks at step 30, resumed on 2 and on 3 (global batch 12).
train 4 "$out/first" --steps 30 --batch 3 --ckpt-dir "$out/c2" --ckpt-every 10
for n in 2 3; do
  rm -rf "$out/c2-$n" && cp -r "$out/c2" "$out/c2-$n"
  train $n "$out/on$n" --steps 60 --batch $((12 / n)) --ckpt-dir "$out/c2-$n" --ckpt-every 10
  [ "$(value "resumed from step" "$out/on$n")" = 30 ] && echo "ok: $n ranks resumed from step 30" \
    || { echo "FAILED: $n ranks did not resume from step 30"; cat "$out/on$n"; fail=1; }
  close_to "loss at step 60 on $n ranks after 4" "$(value "step 60 loss" "$out/on$n")" \
    "$(value "step 60 loss" "$out/ref")"
done

# 3. The latest checkpoint corrupted: named, and the one before resumed.
printf 'garbage' | dd of="$out/c2-2/step_00000060/rank_00001.bin" bs=1 seek=4 conv=notrunc 2>/dev/null
train 2 "$out/fallback" --steps 70 --batch 6 --ckpt-dir "$out/c2-2" --ckpt-every 10
[ "$(value "resumed from step" "$out/fallback")" = 50 ] && echo "ok: fell back to step 50" \
  || { echo "FAILED: did not fall back to step 50"; cat "$out/fallback"; fail=1; }
grep -q "step_00000060/rank_00001.bin.*CRC-32C" "$out/fallback" \
  && echo "ok: the corrupted file is named" \
  || { echo "FAILED: the corrupted file is not named"; cat "$out/fallback"; fail=1; }
# 4. Sharded state across strategies and world sizes.
zero="--lr 0.01 --batch"
train 4 "$out/zref" --shard zero3 --steps 60 $zero 3
train 4 "$out/zfirst" --shard zero3 --steps 30 $zero 3 --ckpt-dir "$out/z" --ckpt-every 10
for pair in zero1:2 zero2:3; do
  s=${pair%%:*} n=${pair##*:}
  rm -rf "$out/z-$s" && cp -r "$out/z" "$out/z-$s"
  train $n "$out/z$s" --shard $s --steps 60 $zero $((12 / n)) --ckpt-dir "$out/z-$s" --ckpt-every 10
  [ "$(value "resumed from step" "$out/z$s")" = 30 ] && echo "ok: $s on $n ranks resumed ZeRO-3's step 30" \
    || { echo "FAILED: $s on $n ranks did not resume"; cat "$out/z$s"; fail=1; }
  close_to "loss at step 60, ZeRO-3 on 4 then $s on $n" "$(value "step 60 loss" "$out/z$s")" \
    "$(value "step 60 loss" "$out/zref")"
done
train 4 "$out/dfirst" --optim adamw --steps 30 $zero 3 --ckpt-dir "$out/dz" --ckpt-every 10
for pair in "zero3:2:$out/dz" "ddp:3:$out/z"; do
  IFS=: read -r s n from <<<"$pair"
  flags=(--shard $s); [ $s = ddp ] && flags=(--optim adamw)
  train $n "$out/x$s" "${flags[@]}" --steps 60 $zero $((12 / n)) --ckpt-dir "$from"
  [ "$(value "resumed from step" "$out/x$s")" = 30 ] && echo "ok: $s on $n ranks resumed step 30 of $(basename "$from")" \
    || { echo "FAILED: $s on $n ranks did not resume"; cat "$out/x$s"; fail=1; }
  close_to "loss at step 60, $s on $n resumed from $(basename "$from") on 4" \
    "$(value "step 60 loss" "$out/x$s")" "$(value "step 60 loss" "$out/zref")"
done

# 5. Inputs from shard files: the loader's position is in the checkpoint.
"$mlp" --make-data "$out/data" --records 500 >/dev/null || { echo "FAILED: --make-data"; fail=1; }
data="--data $out/data --steps 60"
train 4 "$out/dref" $data --batch 3
train 4 "$out/dkilled" $data --batch 3 --ckpt-dir "$out/d" --ckpt-every 5 --kill-at-step $kill_at
[ -n "$(value "resumed from step" "$out/dkilled")" ] && \
  [ "$(value "final weights fnv1a" "$out/dkilled")" = "$(value "final weights fnv1a" "$out/dref")" ] \
  && echo "ok: with the loader, killed at step $kill_at: the same weights" \
  || { echo "FAILED: with the loader, killed at step $kill_at"; tail -n 20 "$out/dkilled"; fail=1; }
rm -rf "$out/d2" && mkdir -p "$out/d2"
train 4 "$out/dfirst" --data "$out/data" --steps 30 --batch 3 --ckpt-dir "$out/d2" --ckpt-every 10
train 2 "$out/don2" $data --batch 6 --ckpt-dir "$out/d2" --ckpt-every 10
close_to "with the loader, loss at step 60 on 2 ranks after 4" "$(value "step 60 loss" "$out/don2")" \
  "$(value "step 60 loss" "$out/dref")"

# 6. Killed in the middle of a background save (right after the call).
async_kill=$((10 + 5 * (RANDOM % 9)))
train 4 "$out/async" --steps 60 --batch 3 --ckpt-dir "$out/c4" --ckpt-every 5 --ckpt-async 1 \
  --kill-at-step $async_kill
resumed=$(value "resumed from step" "$out/async")
got=$(value "final weights fnv1a" "$out/async")
if [ -n "$resumed" ] && [ "$resumed" -lt "$async_kill" ] && [ "$got" = "$ref" ]; then
  echo "ok: killed during the background save of step $async_kill, resumed from step $resumed: the same weights"
else
  echo "FAILED: killed during the save of step $async_kill: resumed from '$resumed', weights $got vs $ref"
  tail -n 20 "$out/async"; fail=1
fi
exit $fail
