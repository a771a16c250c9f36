#!/usr/bin/env bash
# An elastic job (--nnodes=2:3) on three hosts in network namespaces joined
# by a bridge: it starts with 2 nodes, grows to 3 when a third joins, shrinks
# back to 2 when that node's dtrun is killed, grows again, finishes; and a job
# that loses a node below its minimum fails with a message saying so. The
# workers print the round, the world size and the restart count (membership
# changes spend no restart: --max-restarts=0). Last, the CPU trainer in an
# elastic job resumes from its checkpoint in the larger world.
# Exits 77 (skipped) without root or iproute2; a namespace that cannot be
# made with them is a failure.
set -u
dtrun=$1 mlp=${2:-}
. "$(dirname "$0")/lib.sh"
require_netns

tag=rte$$
hosts="${tag}a ${tag}b ${tag}c"
cleanup() {
  for p in ${pids:-}; do kill -9 "$p" 2>/dev/null; done
  for ns in $hosts ${tag}br; do ip netns del "$ns" 2>/dev/null; done
  [ -n "${KEEP_OUT:-}" ] || rm -rf "${out:-/nonexistent}"
}
trap cleanup EXIT
bridge_hosts $tag 10.213.8 a:1 b:2 c:3
set -- $hosts
a=$1 b=$2 c=$3
out=$(mktemp -d)

# A worker: says where it runs, then waits for the end of the test.
show='echo $$ > '"$out"'/worker.$DTRUN_ADDR; echo round=$DTRUN_ROUND world=$WORLD_SIZE rank=$RANK restarts=$TORCHELASTIC_RESTART_COUNT; while [ ! -e '"$out"'/finish ]; do sleep 0.2; done'
elastic() {  # namespace, log, port; $! is the dtrun itself (nsenter execs it)
  nsenter --net=/run/netns/"$1" "$dtrun" --nproc-per-node=1 --nnodes=2:3 --rdzv=10.213.8.1:$3 --token=t \
    --heartbeat-timeout=3 --rdzv-last-call=1 --rdzv-timeout=60 --max-restarts=0 \
    sh -c "$show" >"$2" 2>&1 &
}

# 1. Two nodes start the job (the minimum, after the last call).
elastic "$a" "$out/a" 29500; pa=$!
elastic "$b" "$out/b" 29500; pb=$!
pids="$pa $pb"
wait_for "round=0 world=2" "$out/a" "$out/b"
# 2. A third node joins: every node's workers restart in a world of 3.
elastic "$c" "$out/c" 29500; pc=$!
pids="$pids $pc"
wait_for "round=1 world=3" "$out/a" "$out/b" "$out/c"
check "the newcomer is node 2" "round=1 world=3 rank=2" "$out/c"
# 3. The third node's dtrun is killed: the other two go on in a world of 2
# (its connection to the host closed: at once, not after --heartbeat-timeout),
# and its worker does not outlive it.
kill -9 $pc; wait $pc 2>/dev/null
wait_for "round=2 world=2" "$out/a" "$out/b"
check "membership changes spend no restart" "round=2 world=2 rank=1 restarts=0" "$out/b"
# Its held heartbeat closes with it (then at once), or, if none was held at
# that instant, it falls silent: either way the host names it.
check "the host says which node it lost" "node 2 (10.213.8.3)" "$out/a"
worker=$(cat "$out/worker.10.213.8.3" 2>/dev/null)
for _ in $(seq 25); do [ -n "$worker" ] && running "$worker" && sleep 0.2; done
if [ -z "$worker" ] || running "$worker"; then
  echo "FAILED: the killed node's worker still runs (or never said its pid)"; fail=1
else
  echo "ok: the killed node's worker is gone"
fi
# 4. It comes back, and the job finishes on three nodes.
elastic "$c" "$out/c2" 29500; pc=$!
pids="$pids $pc"
wait_for "round=3 world=3" "$out/a" "$out/b" "$out/c2"
touch "$out/finish"
for p in $pa $pb $pc; do
  wait $p || { echo "FAILED: a node of the finished job exited $?"; fail=1; }
done
echo "ok: the job finished on every node"
rm -f "$out/finish"

# 4b. A node joins the running job and goes silent at once (stopped while
# its Join waits for the round to close): the others wait for its settings
# in vain, and the host drops it within --heartbeat-timeout; the job goes on
# in a world of 2 (it once failed: "could not compare the nodes' settings").
silent() {  # namespace, log
  nsenter --net=/run/netns/"$1" "$dtrun" --nproc-per-node=1 --nnodes=2:3 --rdzv=10.213.8.1:29504 \
    --token=t --heartbeat-timeout=3 --rdzv-last-call=3 --rdzv-timeout=60 --max-restarts=0 \
    sh -c "$show" >"$2" 2>&1 &
}
silent "$a" "$out/sa"; pa=$!
silent "$b" "$out/sb"; pb=$!
pids="$pids $pa $pb"
wait_for "round=0 world=2" "$out/sa" "$out/sb"
silent "$c" "$out/sc"; pc=$!
pids="$pids $pc"
# Stopped as soon as the host has its Join: the others rejoin (a few tenths
# of a second) before the round closes and answers it.
for _ in $(seq 1000); do grep -q "10.213.8.3 joins the running job" "$out/sa" && break; sleep 0.01; done
kill -STOP $pc
wait_for "round=2 world=2" "$out/sa" "$out/sb"
check "the newcomer was silent before its settings" "did not say its settings" "$out/sa"
if grep -q "round=1" "$out/sa" "$out/sb"; then
  echo "FAILED: workers started in the round of the silent newcomer"; fail=1
fi
if grep -q "job failed" "$out/sa" "$out/sb"; then
  echo "FAILED: a silent newcomer ended the job"; grep "job failed" "$out/sa" "$out/sb"; fail=1
else
  echo "ok: a newcomer that went silent is dropped, and the job goes on"
fi
kill -9 $pc 2>/dev/null; wait $pc 2>/dev/null
touch "$out/finish"
for p in $pa $pb; do
  wait $p || { echo "FAILED: a node of the job a silent newcomer joined exited $?"; fail=1; }
done
rm -f "$out/finish"

# 5. A node lost below the minimum fails the job, with the reason.
elastic "$a" "$out/la" 29501; pa=$!
elastic "$b" "$out/lb" 29501; pb=$!
pids="$pids $pa $pb"
wait_for "round=0 world=2" "$out/la" "$out/lb"
kill -9 $pb; wait $pb 2>/dev/null
wait $pa; rc=$?
[ $rc -ne 0 ] && echo "ok: the job failed (exit $rc)" || { echo "FAILED: the job exited 0"; fail=1; }
check "the host says why" "1 node(s) remain, fewer than the 2 that --nnodes=2:3 needs" "$out/la"
# 6. The trainer grows from 2 to 3 nodes and resumes from its checkpoint
# (a file system the hosts share), with the same global batch.
if [ -n "$mlp" ]; then
  train() {  # namespace, log
    nsenter --net=/run/netns/"$1" "$dtrun" --nproc-per-node=1 --nnodes=2:3 \
      --rdzv=10.213.8.1:29502 --token=t --heartbeat-timeout=3 --rdzv-last-call=1 \
      --rdzv-timeout=60 --env RTD_LOG=warn "$mlp" --global-batch 12 --steps 300 --pace-ms 20 \
      --log-every 50 --ckpt-dir "$out/ck" --ckpt-every 10 >"$2" 2>&1 &
  }
  train "$a" "$out/ta"; pa=$!
  train "$b" "$out/tb"; pb=$!
  pids="$pids $pa $pb"
  wait_for "step 50 loss" "$out/ta"
  train "$c" "$out/tc"; pc=$!
  pids="$pids $pc"
  for p in $pa $pb $pc; do
    wait $p || { echo "FAILED: a node of the growing trainer exited $?"; fail=1; }
  done
  check "the trainer ran on 2 nodes first" "world size 2, 6 samples per rank" "$out/ta"
  check "then on 3" "world size 3, 4 samples per rank" "$out/ta"
  check "and resumed from its checkpoint" "resumed from step" "$out/ta"
  check "to the end" "step 300 loss" "$out/ta"
  # 7. A real trainer on 3 nodes loses a node that does not host (its dtrun
  # killed): the survivors' workers fail with their peers, but that is the
  # membership's change, not a failure (--max-restarts=0): they go on in a
  # world of 2 from the checkpoint, and the host names the lost node.
  rm -rf "$out/ck"
  train3() {  # namespace, log
    nsenter --net=/run/netns/"$1" "$dtrun" --nproc-per-node=1 --nnodes=2:3 \
      --rdzv=10.213.8.1:29503 --token=t --rdzv-last-call=3 --rdzv-timeout=60 \
      --env RTD_LOG=warn "$mlp" --global-batch 12 --steps 300 --pace-ms 20 \
      --log-every 50 --ckpt-dir "$out/ck" --ckpt-every 10 >"$2" 2>&1 &
  }
  train3 "$a" "$out/ka"; pa=$!
  train3 "$b" "$out/kb"; pb=$!
  train3 "$c" "$out/kc"; pc=$!
  pids="$pids $pa $pb $pc"
  wait_for "step 50 loss" "$out/ka"
  kill -9 $pc; wait $pc 2>/dev/null
  for p in $pa $pb; do
    wait $p || { echo "FAILED: a surviving node exited $? after another was lost"; fail=1; }
  done
  check "the host names the lost node" "node 2 (10.213.8.3) was lost" "$out/ka"
  check "the survivors went on in a world of 2" "world size 2, 6 samples per rank" "$out/ka"
  check "to the end" "step 300 loss" "$out/ka"
  if grep -q "SIGABRT\|job failed" "$out/ka" "$out/kb"; then
    echo "FAILED: a survivor reported a failure"; grep "SIGABRT\|job failed" "$out/ka" "$out/kb"; fail=1
  else
    echo "ok: no survivor blamed a failure"
  fi
fi
exit $fail
