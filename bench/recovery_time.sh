#!/usr/bin/env bash
# From the kill -9 of a worker to the first step completed after it, on CPU:
# in-process recovery (dtrun --recovery=in-process, mlp_cpu --recover 1)
# against today's restart of every worker from the last checkpoint
# (--max-restarts=1, --restart-backoff 0, a checkpoint every 10 steps), in the
# same run. The worker kills itself at step 50 and prints when (wall clock);
# rank 0 prints when it completes its first step after the resume.
#   bench/recovery_time.sh DTRUN MLP_CPU [NPROC=6] [REPEATS=3]
# Prints a table and one JSON line per run.
set -u
dtrun=$1 mlp=$2 nproc=${3:-6} repeats=${4:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--steps 120 --optim adamw --lr 0.01 --log-every 1000 --pace-ms 20 --kill-at-step 50
        --hidden 256 --global-batch $((nproc * 16)))
. "$(dirname "$0")/kill_to_step.sh"
printf "%-12s %6s %14s %12s\n" mode run kill_to_step_s steps_redone
for i in $(seq "$repeats"); do
  "$dtrun" --nproc-per-node="$nproc" --max-restarts=0 --recovery=in-process --env RTD_LOG=warn \
    "$mlp" "${common[@]}" --recover 1 >"$out/inproc$i" 2>&1 || { echo "in-process run failed"; cat "$out/inproc$i"; exit 1; }
  read -r s r <<<"$(kill_to_step "$out/inproc$i" 50)"
  printf "%-12s %6d %14s %12s\n" in-process "$i" "$s" "$r"
  echo "{\"mode\":\"in-process\",\"run\":$i,\"nproc\":$nproc,\"kill_to_step_s\":$s,\"steps_redone\":$r}" >>"$out/json"
  rm -rf "$out/ck"
  "$dtrun" --nproc-per-node="$nproc" --max-restarts=1 --restart-backoff=0 --env RTD_LOG=warn \
    "$mlp" "${common[@]}" --ckpt-dir "$out/ck" --ckpt-every 10 >"$out/restart$i" 2>&1 ||
    { echo "restart run failed"; cat "$out/restart$i"; exit 1; }
  read -r s r <<<"$(kill_to_step "$out/restart$i" 50)"
  printf "%-12s %6d %14s %12s\n" restart "$i" "$s" "$r"
  echo "{\"mode\":\"restart\",\"run\":$i,\"nproc\":$nproc,\"kill_to_step_s\":$s,\"steps_redone\":$r}" >>"$out/json"
done
cat "$out/json"
