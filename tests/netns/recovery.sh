#!/usr/bin/env bash
# In-process recovery across hosts in network namespaces, 2 workers each
# (mlp_cpu, DDP over Gloo on TCP):
# 1. two hosts; the last worker of host b kills itself at step 20; its dtrun
#    starts it again alone, the three others keep their processes, and the
#    job ends with the weights of a run without the failure, bit for bit;
# 2. three hosts (--nnodes=2:3); host c's dtrun is killed mid-job: the four
#    workers of a and b keep their processes and move to the next round in
#    place (ranks 0-3 of 4), and the job ends with the loss of a run without
#    the failure to 1e-6 (float rounding: the same global batch, summed in
#    another order over 4 ranks instead of 6);
# 3. the same, host c cut off instead (its link down): the survivors'
#    collectives wait on it until dtrun says their generation ends, then
#    abort and recover in place, the same loss;
# 4. the same job started on a and b, c joining mid-job: a's and b's
#    workers keep their processes, c's get the state from them, the same loss.
# Exits 77 (skipped) without root or iproute2.
set -u
dtrun=$1 mlp=$2
. "$(dirname "$0")/lib.sh"
require_netns

tag=rtr$$
cleanup() {
  for p in ${pids:-}; do kill -9 "$p" 2>/dev/null; done
  for ns in ${tag}a ${tag}b ${tag}c ${tag}br; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "${out:-/nonexistent}"
}
trap cleanup EXIT
bridge_hosts $tag 10.215.7 a:1 b:2 c:3
out=$(mktemp -d)
kept() {  # log, ranks...: each printed its pid once (it was never started again)
  local log=$1 r; shift
  for r in "$@"; do
    [ "$(grep -c "rank $r pid" "$log")" = 1 ] && echo "ok: rank $r kept its process" ||
      { echo "FAILED: rank $r started again"; fail=1; }
  done
}
hash_of() { cat "$@" | grep -o "final weights fnv1a [0-9a-f]*" | awk '{print $4}' | head -1; }

job() {  # port, log suffix, dtrun flags, trainer flags...
  local port=$1 tag2=$2 flags=$3; shift 3
  for h in a b; do
    # shellcheck disable=SC2086
    nsenter --net=/run/netns/"$tag$h" "$dtrun" --nproc-per-node=2 --nnodes=2 \
      --rdzv=10.215.7.1:$port --token=t --rdzv-timeout=60 --max-restarts=0 $flags \
      --env RTD_LOG=warn "$mlp" --steps 60 --optim adamw --lr 0.01 --log-every 20 --pace-ms 10 \
      "$@" >"$out/$tag2.$h" 2>&1 &
    pids="${pids:-} $!"
    eval "p_$h=\$!"
  done
  finish 90 "$p_a" "$p_b" "$out/$tag2.a" "$out/$tag2.b"
}

job 29601 plain "" || { echo "FAILED: the run without a failure"; tail -n 20 "$out"/plain.*; exit 1; }
want=$(hash_of "$out"/plain.*)
if job 29602 rec --recovery=in-process --kill-at-step 20 --recover 1; then
  echo "ok: the job finished after the loss"
else
  echo "FAILED: the job failed"; tail -n 30 "$out"/rec.*; fail=1
fi
check "host b's dtrun started its worker alone" \
  "worker rank 3 was killed by signal 9 (Killed); starting it again alone, in generation 1" "$out/rec.b"
check "host a's workers recovered in place" "rank 0 recovered in generation 1" "$out/rec.a"
check "rank 3 got the state of step 19" "rank 3 joined generation 1, the state from rank 0: resuming after step 19" "$out/rec.b"
kept "$out/rec.a" 0 1
got=$(hash_of "$out"/rec.*)
[ -n "$got" ] && [ "$got" = "$want" ] && echo "ok: the final weights equal the unbroken run's ($got)" ||
  { echo "FAILED: final weights '$got', without the failure '$want'"; fail=1; }

# 2. A node lost: the survivors' workers move to the next round in place.
elastic() {  # host, log, dtrun flags, trainer flags...
  local h=$1 log=$2 flags=$3; shift 3
  # shellcheck disable=SC2086
  nsenter --net=/run/netns/"$tag$h" "$dtrun" --nproc-per-node=2 --nnodes=2:3 \
    --rdzv=10.215.7.1:$port --token=t --rdzv-timeout=60 --rdzv-last-call=2 --max-restarts=0 $flags \
    --env RTD_LOG=warn "$mlp" --steps 100 --optim adamw --lr 0.01 --log-every 10 --pace-ms 20 \
    --global-batch 12 "$@" >"$log" 2>&1 &
}
loss_at() { grep -h "step $2 loss" "$1" | awk '{print $6}' | head -1; }
moved_in_place() {  # log suffix, kill time (ms), after what: a's and b's workers kept, the time, the loss
  kept "$out/$1.a" 0 1
  kept "$out/$1.b" 2 3
  local done_ms
  done_ms=$(grep -o "completed after the resume at [0-9]*" "$out/$1.a" | awk '{print $6}' | head -1)
  [ -n "$done_ms" ] && echo "info: from $3 to the first step after it: $(( done_ms - $2 )) ms"
  same_loss "$out/$1.a" "$3"
}
same_loss() {  # log, after what: its final loss is the unbroken run's ($want) to 1e-6
  local got
  got=$(loss_at "$1" 100)
  if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN{d=(a-b)/b; if (d<0) d=-d; exit !(d < 1e-6)}'; then
    echo "ok: the final loss $got after $2 is the unbroken run's $want to 1e-6"
  else
    echo "FAILED: final loss '$got' after $2, without it '$want'"; fail=1
  fi
}
port=29603
for h in a b c; do elastic $h "$out/full.$h" ""; eval "q_$h=\$!"; pids="$pids $!"; done
finish 90 "$q_a" "$q_b" "$q_c" "$out"/full.* || { echo "FAILED: the 3-host run without a failure"; tail -n 20 "$out"/full.*; exit 1; }
want=$(loss_at "$out/full.a" 100)
port=29604
for h in a b c; do elastic $h "$out/node.$h" --recovery=in-process --recover 1; eval "q_$h=\$!"; pids="$pids $!"; done
for _ in $(seq 300); do grep -q "step 30 loss" "$out/node.a" && break; sleep 0.1; done
t0=$(date +%s%3N)
kill -9 "$q_c"
if finish 90 "$q_a" "$q_b" "$out"/node.*; then echo "ok: the job finished on the two hosts left"; else
  echo "FAILED: a surviving host failed"; tail -n 30 "$out"/node.a "$out"/node.b; fail=1; fi
check "host a's dtrun kept its workers" "rejoining, the workers kept" "$out/node.a"
check "they moved to the next round" "the workers move to round 1 in place" "$out/node.b"
check "the global batch is split over 4 ranks" "world size 4, 3 samples per rank" "$out/node.a"
moved_in_place node "$t0" "the kill of host c's dtrun"

# 3. A node cut off (its link down): its peers' connections stay open, so
# the survivors' collectives wait on it; when the host drops it (after the
# heartbeat timeout), dtrun says their generation ends and their watch
# aborts the communicator: they recover as in 2, long before RTD_TIMEOUT_S.
port=29606
for h in a b c; do
  elastic $h "$out/cut.$h" "--recovery=in-process --heartbeat-timeout=3 --env RTD_TIMEOUT_S=120" --recover 1
  eval "q_$h=\$!"; pids="$pids $!"
done
for _ in $(seq 300); do grep -q "step 30 loss" "$out/cut.a" && break; sleep 0.1; done
in_ns ${tag}c ip link set "v${tag}2" down
t0=$(date +%s%3N)
if finish 90 "$q_a" "$q_b" "$out"/cut.*; then echo "ok: the job finished without the cut-off host"; else
  echo "FAILED: a surviving host failed"; tail -n 30 "$out"/cut.a "$out"/cut.b; fail=1; fi
check "the survivors' watch aborted the waiting collectives" "aborting the communicator" "$out/cut.a"
moved_in_place cut "$t0" "the cut (heartbeat timeout 3 s)"
in_ns ${tag}c ip link set "v${tag}2" up
# The cut-off host's dtrun ends on its own (it lost the host); bounded too.
finish 60 "$q_c" "$out/cut.c" >"$out/cut.finish"
grep -q "still ran" "$out/cut.finish" && { cat "$out/cut.finish"; fail=1; }

# 4. A node joins: the four running workers keep their processes and move
# to the next round in place; the newcomer's two get the state from them.
port=29605
for h in a b; do elastic $h "$out/grow.$h" --recovery=in-process --recover 1; eval "q_$h=\$!"; pids="$pids $!"; done
for _ in $(seq 300); do grep -q "step 30 loss" "$out/grow.a" && break; sleep 0.1; done
elastic c "$out/grow.c" --recovery=in-process --recover 1; q_c=$!; pids="$pids $!"
if finish 90 "$q_a" "$q_b" "$q_c" "$out"/grow.*; then echo "ok: the grown job finished"; else
  echo "FAILED: the grown job failed"; tail -n 30 "$out"/grow.*; fail=1; fi
check "the running workers moved" "the workers move to round 1 in place" "$out/grow.a"
check "the newcomer's workers got the state" "rank 4 joined generation 0, the state from rank 0" "$out/grow.c"
kept "$out/grow.a" 0 1
same_loss "$out/grow.a" "growing"
exit $fail
