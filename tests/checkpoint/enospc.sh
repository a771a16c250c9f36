#!/usr/bin/env bash
# A save that fills the disk: on a 256 KiB tmpfs the CPU trainer's first
# checkpoint (step 5) fits and its second (step 10) does not: the save fails
# on every rank, saying that no space is left, how large the failing rank's
# part was and how much was free, and leaves nothing of itself behind (no
# step_*.tmp, the space free again), with step 5 still whole.
# Exits 77 (skipped) without root or where mounting a tmpfs is not permitted.
#   tests/checkpoint/enospc.sh DTRUN MLP_CPU
set -u
dtrun=$1 mlp=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root to mount a small tmpfs"; exit 77; }
dir=$(mktemp -d)
mount -t tmpfs -o size=256k tmpfs "$dir" 2>/dev/null ||
  { rmdir "$dir"; echo "SKIPPED: mounting a tmpfs is not permitted here"; exit 77; }
log=$(mktemp)
trap 'umount "$dir"; rmdir "$dir"; rm -f "$log"' EXIT
fail=0
"$dtrun" --nproc-per-node=2 --env RTD_LOG=warn "$mlp" --steps 10 --hidden 1024 \
  --ckpt-dir "$dir/c" --ckpt-every 5 >"$log" 2>&1
rc=$?
[ $rc -ne 0 ] && echo "ok: the trainer stopped (exit $rc)" || { echo "FAILED: it exited 0"; fail=1; }
for what in "No space left on device" "bytes are free in $dir/c" "its part: "; do
  grep -qF "$what" "$log" && echo "ok: says '$what'" || { echo "FAILED: no '$what'"; fail=1; }
done
if ls "$dir/c" | grep -q tmp; then echo "FAILED: left $(ls "$dir/c")"; fail=1; else
  echo "ok: nothing of the failed save is left"; fi
left=$(ls "$dir/c" | tr '\n' ' ')
[ "$left" = "latest series step_00000005 " ] && echo "ok: the checkpoint before is all that is left" ||
  { echo "FAILED: left: $left"; fail=1; }
free=$(df -k --output=avail "$dir" | tail -1)
[ "$free" -ge 64 ] && echo "ok: the failed save's space is free again (${free} KiB)" ||
  { echo "FAILED: only ${free} KiB free after the failed save"; fail=1; }
[ $fail -eq 0 ] || cat "$log"
exit $fail
