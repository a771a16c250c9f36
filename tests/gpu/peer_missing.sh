#!/usr/bin/env bash
# A rank that never reaches NCCL's init, on real NCCL: the others fail at
# RTD_TIMEOUT_S with a kTimeout that names the missing rank, the job ends
# (no hang past the timeout, no crash at exit although NCCL's blocking init
# is left on a thread of its own), and dtrun reports the failure.
#   - rank 1 missing: rank 0 made the unique id and waits inside NCCL's init;
#   - rank 0 missing (2 GPUs or more): rank 1 waits for the unique id.
# The missing rank's process runs `sleep` in place of the program.
#   tests/gpu/peer_missing.sh DTRUN COLLECTIVE_BENCH
# Exits 77 (skipped) without a GPU.
set -u
dtrun=$1 bench=$2
. "$(dirname "$0")/lib.sh"
require_gpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
timeout_s=15
absent() {  # what, pattern, log
  if grep -qE -- "$2" "$work/$3"; then echo "FAIL: $1"; grep -E -- "$2" "$work/$3" | head -3; fail=1; else echo "ok: $1"; fi
}
job() {  # log, missing rank
  local start=$SECONDS rc
  # One GPU: rank 1's program never runs, so it needs none; rank 0 is told
  # it is its node's only worker, or it would refuse 2 workers on 1 GPU.
  local only=""
  [ "$ngpu" -ge 2 ] || only="export LOCAL_WORLD_SIZE=1;"
  # shellcheck disable=SC2016  # $RANK and $@ are the inner shell's
  timeout -k 10 $((timeout_s + 60)) "$dtrun" --nproc-per-node=2 --max-restarts=0 \
    --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn --env RTD_TIMEOUT_S=$timeout_s \
    --env RTD_MISSING_RANK="$2" \
    bash -c 'if [ "$RANK" = "$RTD_MISSING_RANK" ]; then exec sleep 600; fi; '"$only"' exec "$@"' _ \
    "$bench" --mode ours --ops all_reduce --dtypes float32 --min-bytes 4 --max-bytes 4 --iters 1 \
    >"$work/$1" 2>&1
  rc=$?
  local took=$((SECONDS - start))
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ]; then
    echo "ok: the job failed (exit $rc) in $took s"
  else
    echo "FAIL: the job ended with exit $rc in $took s"
    fail=1
  fi
  if [ $took -le $((timeout_s + 45)) ]; then
    echo "ok: it ended within the timeout and 45 s"
  else
    echo "FAIL: it took $took s (timeout $timeout_s s)"
    fail=1
  fi
}

job rank1_missing 1
check "rank 0 timed out creating the communicator" "creating the NCCL communicator did not complete within $((timeout_s * 1000)) ms" rank1_missing
check "rank 0 named the rank that never came" "rank(s) 1 never reached NCCL's init" rank1_missing
absent "no crash at exit" "Segmentation fault|core dumped|terminate called|Aborted" rank1_missing
if [ "$ngpu" -ge 2 ]; then
  job rank0_missing 0
  check "rank 1 named rank 0 as the one that never came" "rank 1: rank 0 never joined communicator" rank0_missing
  absent "no crash at exit" "Segmentation fault|core dumped|terminate called|Aborted" rank0_missing
else
  echo "skipped: rank 0 missing needs 2 GPUs (rank 1 would run on GPU 1)"
fi
[ $fail -eq 0 ] || { echo "--- logs"; tail -15 "$work"/rank*; }
exit $fail
