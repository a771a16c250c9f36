#!/usr/bin/env bash
# In-process recovery on CPU (Gloo): dtrun --recovery=in-process starts a
# lost worker again alone and mlp_cpu --recover 1 recovers with
# rtd::Recovery. The survivors keep their processes (each prints its pid
# once), the loss curve goes on from the last completed step, and the final
# weights equal those of a run without the failure, bit for bit (the same
# reductions in the same order: Gloo's are deterministic for a given world).
#   recovery.sh DTRUN MLP_CPU
set -u
dtrun=$1 mlp=$2
out=$(mktemp -d)
trap 'kill -9 ${job:-} 2>/dev/null; rm -rf "$out"' EXIT
fail=0
check() {  # name, expected substring, file
  if grep -qF -- "$2" "$3"; then echo "ok: $1"; else echo "FAILED: $1 (no '$2')"; cat "$3"; fail=1; fi
}
hash_of() { grep -o "final weights fnv1a [0-9a-f]*" "$1" | awk '{print $4}'; }
pid_lines() { grep -c "rank $2 pid .* generation" "$1"; }
train() {  # nproc, log, dtrun flags (one word, may be empty), trainer flags...
  local n=$1 log=$2 flags=$3; shift 3
  # shellcheck disable=SC2086
  "$dtrun" --nproc-per-node="$n" --max-restarts=0 $flags --env RTD_LOG=warn "$mlp" --steps 60 \
    --optim adamw --lr 0.01 --log-every 10 --pace-ms 10 "$@" >"$log" 2>&1
}

for n in 2 3; do
  last=$((n - 1))
  train $n "$out/plain$n" "" || { echo "FAILED: the run without a failure ($n workers)"; cat "$out/plain$n"; exit 1; }
  want=$(hash_of "$out/plain$n")
  # 1. The last rank SIGKILLs itself at the start of step 20.
  if train $n "$out/rec$n" --recovery=in-process --kill-at-step 20 --recover 1; then
    echo "ok: $n workers: the job finished after the loss"
  else
    echo "FAILED: $n workers: the job failed"; cat "$out/rec$n"; fail=1
  fi
  check "$n workers: dtrun started the lost worker alone" \
    "worker rank $last was killed by signal 9 (Killed); starting it again alone, in generation 1" "$out/rec$n"
  check "$n workers: rank 0 went on after the last completed step" \
    "rank 0 recovered in generation 1 in" "$out/rec$n"
  check "$n workers: the lost rank got the state of step 19 from rank 0" \
    "rank $last joined generation 1, the state from rank 0: resuming after step 19" "$out/rec$n"
  for r in $(seq 0 $((last - 1))); do
    [ "$(pid_lines "$out/rec$n" $r)" = 1 ] && echo "ok: rank $r kept its process" ||
      { echo "FAILED: rank $r started more than once"; grep "pid" "$out/rec$n"; fail=1; }
  done
  check "$n workers: the lost rank came back in generation 1" "rank $last pid" "$out/rec$n"
  got=$(hash_of "$out/rec$n")
  [ -n "$got" ] && [ "$got" = "$want" ] && echo "ok: $n workers: the final weights equal the unbroken run's ($got)" ||
    { echo "FAILED: $n workers: final weights $got, without the failure $want"; fail=1; }
done

# 2. Two losses in one job, the second of rank 0 itself (killed from
# outside, mid-run): its state then comes from rank 1.
"$dtrun" --nproc-per-node=3 --max-restarts=0 --recovery=in-process --env RTD_LOG=warn "$mlp" \
  --steps 150 --optim adamw --lr 0.01 --log-every 10 --pace-ms 20 --kill-at-step 20 --recover 1 \
  >"$out/twice" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q "step 60 loss" "$out/twice" && break; sleep 0.1; done
pid0=$(grep -o "rank 0 pid [0-9]*" "$out/twice" | awk '{print $4}')
[ -n "$pid0" ] && kill -9 "$pid0"
wait $job && echo "ok: two losses: the job finished" || { echo "FAILED: two losses: the job failed"; cat "$out/twice"; fail=1; }
check "dtrun started rank 0 again alone" \
  "worker rank 0 was killed by signal 9 (Killed); starting it again alone, in generation 2" "$out/twice"
check "rank 0 came back with the state of rank 1" "rank 0 joined generation 2, the state from rank 1" "$out/twice"
"$dtrun" --nproc-per-node=3 --max-restarts=0 --env RTD_LOG=warn "$mlp" --steps 150 --optim adamw \
  --lr 0.01 --log-every 10 >"$out/plain150" 2>&1
[ "$(hash_of "$out/twice")" = "$(hash_of "$out/plain150")" ] &&
  echo "ok: two losses: the final weights equal the unbroken run's" ||
  { echo "FAILED: two losses: $(hash_of "$out/twice") vs $(hash_of "$out/plain150")"; fail=1; }

# 3. A trainer that does not recover: the round ends at once, as without the flag.
start=$(date +%s)
if train 3 "$out/norec" --recovery=in-process --kill-at-step 20; then
  echo "FAILED: a trainer without recovery finished after a loss"; fail=1
else
  echo "ok: a trainer without recovery fails the job (in $(( $(date +%s) - start )) s)"
fi
check "dtrun says why it did not start the worker alone" \
  "not every worker of the job recovers in process" "$out/norec"
exit $fail
