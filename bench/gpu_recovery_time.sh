#!/usr/bin/env bash
# From the kill -9 of a worker to the first step completed after it, on GPUs
# (mlp_gpu DDP with AdamW, 537 M parameters by default): in-process recovery
# (dtrun --recovery=in-process, --recover 1: the survivor keeps its process
# and CUDA context, NCCL is rebuilt, the replacement gets the state from it)
# against today's restart of every worker from the last checkpoint
# (--max-restarts=1, --restart-backoff 0, a checkpoint every 10 steps), in the
# same run. The last rank kills itself at step 20 and prints when; rank 0
# prints when it completes its first step after the resume. Also printed:
# where the in-process time went (the survivor's rebuild and state
# transfer, NCCL's own initialization in the replacement).
# With 2 GPUs one dtrun runs both workers; with one GPU (SHARED=1), two
# dtruns on this host share it, told apart as NCCL hosts (socket transport:
# not a figure to compare with two GPUs).
#   bench/gpu_recovery_time.sh DTRUN MLP_GPU [REPEATS=2] [HIDDEN=8192]
set -u
dtrun=$1 mlp=$2 repeats=${3:-2} hidden=${4:-8192}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ngpu=$(nvidia-smi -L | wc -l)
common=(--hidden "$hidden" --layers 8 --batch 8192 --steps 30 --log-every 1000 --kill-at-step 20)
env=(--env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn,nccl:info,recovery:info)
port=$((29900 + RANDOM % 50))
run() {  # log, dtrun flags...: 2 workers
  local log=$1; shift
  if [ "$ngpu" -ge 2 ]; then
    "$dtrun" --nproc-per-node=2 "${env[@]}" "$@" >"$log" 2>&1
    return
  fi
  local pids="" n rc=0
  for n in 0 1; do
    "$dtrun" --nnodes=2 --nproc-per-node=1 --rdzv=127.0.0.1:$port --token=t "${env[@]}" \
      --env NCCL_HOSTID=bench-$n --env NCCL_IB_DISABLE=1 "$@" >"$log.$n" 2>&1 &
    pids="$pids $!"
    sleep 0.3
  done
  for p in $pids; do wait "$p" || rc=1; done
  cat "$log".0 "$log".1 >"$log"
  port=$((port + 1))
  return $rc
}
. "$(dirname "$0")/kill_to_step.sh"
echo "GPUs: $ngpu ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); hidden $hidden, 8 layers"
printf "%-12s %4s %15s %13s\n" mode run kill_to_step_s steps_redone
for i in $(seq "$repeats"); do
  run "$out/inproc$i" --max-restarts=0 --recovery=in-process "$mlp" "${common[@]}" --recover 1 ||
    { echo "in-process run failed"; tail -30 "$out/inproc$i"; exit 1; }
  read -r s r <<<"$(kill_to_step "$out/inproc$i" 20)"
  printf "%-12s %4d %15s %13s\n" in-process "$i" "$s" "$r"
  grep -h "recovered in generation" "$out/inproc$i" | sed 's/^/    /'
  grep -h "ready on GPU" "$out/inproc$i" | tail -2 | sed 's/^/    /'
  echo "{\"mode\":\"in-process\",\"run\":$i,\"gpus\":$ngpu,\"hidden\":$hidden,\"kill_to_step_s\":$s,\"steps_redone\":$r}" >>"$out/json"
  rm -rf "$out/ck"
  run "$out/restart$i" --max-restarts=1 --restart-backoff=0 "$mlp" "${common[@]}" \
    --ckpt-dir "$out/ck" --ckpt-every 10 ||
    { echo "restart run failed"; tail -30 "$out/restart$i"; exit 1; }
  read -r s r <<<"$(kill_to_step "$out/restart$i" 20)"
  printf "%-12s %4d %15s %13s\n" restart "$i" "$s" "$r"
  echo "{\"mode\":\"restart\",\"run\":$i,\"gpus\":$ngpu,\"hidden\":$hidden,\"kill_to_step_s\":$s,\"steps_redone\":$r}" >>"$out/json"
done
cat "$out/json"
