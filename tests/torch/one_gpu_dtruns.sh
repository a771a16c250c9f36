# shellcheck shell=bash
# Sourced by the torch tests' runners. N ranks on one GPU:
#   one_gpu_dtruns DTRUN N PORT LOG_PREFIX [DTRUN_FLAGS...] -- PROGRAM ARGS...
# starts N dtruns of one worker each on this host (--nnodes=N, the rendezvous
# at 127.0.0.1:PORT, hosted by the first), told apart as NCCL hosts
# (NCCL_HOSTID) so that NCCL takes N ranks on one device (over its socket
# transport); dtrun i's output goes to LOG_PREFIX.i. Waits for all of them;
# returns 1 when any failed (or ran past 300 s).
one_gpu_dtruns() {
  local dtrun=$1 n=$2 port=$3 prefix=$4 i pids="" rc=0
  shift 4
  local flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  for i in $(seq 0 $((n - 1))); do
    timeout 300 "$dtrun" --nnodes="$n" --nproc-per-node=1 --rdzv=127.0.0.1:"$port" --token=t \
      --max-restarts=0 "${flags[@]}" --env NCCL_HOSTID=rtd-one-gpu-"$i" --env NCCL_IB_DISABLE=1 \
      --env NCCL_NVLS_ENABLE=0 "$@" >"$prefix.$i" 2>&1 &
    pids="$pids $!"
    sleep 0.3  # the first hosts the rendezvous
  done
  for i in $pids; do wait "$i" || rc=1; done
  return $rc
}
