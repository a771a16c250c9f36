#!/usr/bin/env bash
# In-process recovery on GPUs (mlp_gpu --recover 1, DDP on NCCL): the last
# rank kills itself at step 20; its dtrun starts it again alone, the other
# keeps its process and CUDA context, rebuilds NCCL with the replacement and
# sends it the weights and AdamW's moments; the job ends with the final
# weights of a run without the failure, bit for bit.
# With 2 GPUs: one dtrun, 2 workers. With one: two dtruns on this host
# (--nnodes=2, a worker each), both on GPU 0, told apart as NCCL hosts
# (NCCL_HOSTID) so that NCCL takes two ranks on one GPU (over its socket
# transport). Exits 77 (skipped) without a GPU.
#   tests/gpu/recovery.sh DTRUN MLP_GPU
set -u
dtrun=$1 mlp=$2
. "$(dirname "$0")/lib.sh"
require_gpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
model=(--hidden 1024 --layers 4 --batch 2048 --log-every 10 --steps 40)
port=$((29700 + RANDOM % 200))
job() {  # log, dtrun flags (one word), mlp_gpu flags...
  local log=$1 flags=$2; shift 2
  if [ "$ngpu" -ge 2 ]; then
    # shellcheck disable=SC2086
    "$dtrun" --nproc-per-node=2 --max-restarts=0 $flags --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn \
      "$mlp" "${model[@]}" "$@" >"$work/$log" 2>&1
    return
  fi
  local pids="" n rc=0
  for n in 0 1; do
    # shellcheck disable=SC2086
    "$dtrun" --nnodes=2 --nproc-per-node=1 --rdzv=127.0.0.1:$port --token=t --max-restarts=0 $flags \
      --env NCCL_HOSTID=rtd-recovery-$n --env NCCL_IB_DISABLE=1 --env NCCL_NVLS_ENABLE=0 \
      --env RTD_LOG=warn "$mlp" "${model[@]}" "$@" >"$work/$log.$n" 2>&1 &
    pids="$pids $!"
    sleep 0.3  # the first hosts the rendezvous
  done
  for p in $pids; do wait "$p" || rc=1; done
  cat "$work/$log".0 "$work/$log".1 >"$work/$log"
  port=$((port + 1))
  return $rc
}
checksum() { grep -o "final weights checksum [0-9a-f]*" "$work/$1" | tail -1 | awk '{ print $4 }'; }

job plain "" || { echo "FAIL: the run without a failure"; tail -20 "$work/plain"; exit 1; }
want=$(checksum plain)
if job rec --recovery=in-process --recover 1 --kill-at-step 20; then
  echo "ok: the job finished after the loss"
else
  echo "FAIL: the job failed"; tail -40 "$work"/rec*; fail=1
fi
check "dtrun started the lost worker alone" "worker rank 1 was killed by signal 9 (Killed); starting it again alone, in generation 1" rec
check "rank 0 recovered in place" "rank 0 recovered in generation 1" rec
check "rank 1 got rank 0's state of step 19" "rank 1 joined generation 1, the state from rank 0: resuming after step 19" rec
[ "$(grep -c "rank 0 pid" "$work/rec")" = 1 ] && echo "ok: rank 0 kept its process" ||
  { echo "FAIL: rank 0 was started again"; fail=1; }
got=$(checksum rec)
if [ -n "$got" ] && [ "$got" = "$want" ]; then echo "ok: the final weights equal the unbroken run's ($got)"
else echo "FAIL: final weights checksum '$got', without the failure '$want'"; fail=1; fi
grep -h "recovered in generation" "$work/rec" | sed 's/^/info: /'
exit $fail
