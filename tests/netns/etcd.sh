#!/usr/bin/env bash
# The etcd backend (--rdzv-backend=etcd) on a real 3-member etcd cluster and
# 3 training hosts (2 workers each), all in network namespaces on one bridge:
# 1. the job starts on the three nodes;
# 2. node 0's dtrun (the elected host) and one etcd member are killed at
#    once: the two other nodes go on in a new round, one of them elected host,
#    spending no restart;
# 3. a node joins again and the job grows back to three;
# 4. a node is cut off from the network: the others drop it within the
#    heartbeat timeout, and its own workers stop;
# 5. in-process recovery (the workers' store in etcd): the host's dtrun is
#    killed, the other nodes' workers keep their processes and end with the
#    loss of a run without the failure;
# 6. the trainer, saving checkpoints, on a paused etcd (all three members
#    stopped): a pause shorter than the heartbeat timeout is ridden out; a
#    longer one stops every node at its lease's TTL, each saying that it
#    lost its lease, no worker blamed for an abort;
# 7. the trainer loses two of the three etcd members: every node stops with
#    a message that says so, and the last checkpoint resumes.
# Exits 77 (skipped) without root, iproute2 or etcd.
set -u
dtrun=$1 mlp=$2
. "$(dirname "$0")/lib.sh"
require_netns
command -v etcd >/dev/null || skip "etcd is not installed (deploy/install_deps.sh installs etcd-server)"

tag=rtx$$
names="e1 e2 e3 a b c"
cleanup() {
  for p in ${pids:-} ${etcd_pids:-}; do kill -9 "$p" 2>/dev/null; done
  for n in $names br; do ip netns del "$tag$n" 2>/dev/null; done
  rm -rf "${out:-/nonexistent}"
}
trap cleanup EXIT
net=10.214.9
bridge_hosts $tag $net e1:11 e2:12 e3:13 a:1 b:2 c:3
out=$(mktemp -d)
members=$net.11:2379,$net.12:2379,$net.13:2379
cluster=e1=http://$net.11:2380,e2=http://$net.12:2380,e3=http://$net.13:2380

start_etcd() {  # name, last octet: $! is the member (nsenter execs it)
  nsenter --net=/run/netns/"$tag$1" etcd --name "$1" --data-dir "$out/$1.etcd" \
    --listen-client-urls "http://$net.$2:2379" --advertise-client-urls "http://$net.$2:2379" \
    --listen-peer-urls "http://$net.$2:2380" --initial-advertise-peer-urls "http://$net.$2:2380" \
    --initial-cluster "$cluster" --initial-cluster-token "$tag" >>"$out/$1.log" 2>&1 &
}
start_etcd e1 11; p1=$!
start_etcd e2 12; p2=$!
start_etcd e3 13; p3=$!
etcd_pids="$p1 $p2 $p3"
healthy() {  # waits up to 20 s for every member to answer
  for _ in $(seq 100); do
    in_ns "${tag}a" env ETCDCTL_API=3 etcdctl --endpoints="$members" --dial-timeout=1s \
      endpoint health >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}
healthy || { tail -n 20 "$out"/e*.log; setup_failed "the etcd cluster did not become healthy"; }
echo "ok: a 3-member etcd cluster is up"

show='echo $$ >> '"$out"'/worker.$DTRUN_ADDR; echo round=$DTRUN_ROUND world=$WORLD_SIZE rank=$RANK restarts=$TORCHELASTIC_RESTART_COUNT; while [ ! -e '"$out"'/finish ]; do sleep 0.2; done'
node() {  # host, log: $! is the dtrun itself (nsenter execs it)
  nsenter --net=/run/netns/"$tag$1" "$dtrun" --nproc-per-node=2 --nnodes=2:3 --rdzv-backend=etcd --rdzv="$members" \
    --rdzv-id=job1 --token=t --heartbeat-timeout=5 --rdzv-last-call=1 --rdzv-timeout=60 \
    --max-restarts=0 sh -c "$show" >"$2" 2>&1 &
}
gone() {  # pid: waits up to 10 s for it to end
  for _ in $(seq 50); do running "$1" || return 0; sleep 0.2; done
  return 1
}

# 1. Three nodes start the job.
node a "$out/a"; pa=$!
node b "$out/b"; pb=$!
node c "$out/c"; pc=$!
pids="$pa $pb $pc"
wait_for "round=0 world=6" "$out/a" "$out/b" "$out/c" || exit 1
host=$(grep -l "elected to host" "$out/a" "$out/b" "$out/c" | head -1)
host=${host##*/}
[ -n "$host" ] && echo "ok: node $host was elected host" || { echo "FAILED: no node says it hosts"; exit 1; }
check "the host is node 0" "[dtrun node 0]" "$out/$host"
others=$(echo a b c | tr ' ' '\n' | grep -v "^$host$" | tr '\n' ' ')
set -- $others
s1=$1 s2=$2

# 2. The host's dtrun and one etcd member die at once.
eval "hp=\$p$host"
t0=$(date +%s.%N)
kill -9 "$hp" "$p1"
wait "$hp" 2>/dev/null
wait_for "round=1 world=4" "$out/$s1" "$out/$s2"
t1=$(date +%s.%N)
echo "info: from the kill of the host to the new round's workers: $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s"
check "a survivor took over the running round" "taking over round 0 (1 of its 3 node(s) lost)" \
  "$(grep -l "taking over" "$out/$s1" "$out/$s2" | head -1 || echo "$out/$s1")"
if grep -h "round=1 " "$out/$s1" "$out/$s2" | grep -qv "restarts=0"; then
  echo "FAILED: losing the host spent a restart"; fail=1
else echo "ok: losing the host spends no restart"; fi
cat "$out/$s1" "$out/$s2" | grep -q "job failed" && { echo "FAILED: a survivor failed"; fail=1; }
worker=$(grep -h . "$out"/worker.$net.$(case $host in a) echo 1;; b) echo 2;; c) echo 3;; esac) 2>/dev/null | head -1)
if [ -n "$worker" ] && gone "$worker"; then echo "ok: the killed host's workers are gone"; else
  echo "FAILED: the killed host's workers outlived it"; fail=1; fi

# 3. The etcd member comes back, the lost node joins again: three nodes.
start_etcd e1 11; p1=$!
etcd_pids="$p1 $p2 $p3"
node "$host" "$out/${host}2"; hp=$!
pids="$pids $hp"
wait_for "round=2 world=6" "$out/$s1" "$out/$s2" "$out/${host}2"

# 4. A node is cut off (its link down): dropped by the others within the
# heartbeat timeout; its own workers stop, and so does its dtrun.
cut=$s2
eval "pcut=\$p$cut"
[ "$cut" = "$host" ] && pcut=$hp
i=0; for n in $names; do [ "$n" = "$cut" ] && break; i=$((i + 1)); done
in_ns "$tag$cut" ip link set "v$tag$i" down
wait_for "round=3 world=4" "$out/$s1" "$out/${host}2"
if gone "$pcut" || { sleep 10; ! running "$pcut"; }; then echo "ok: the cut-off node's dtrun ended"; else
  echo "FAILED: the cut-off node's dtrun still runs"; fail=1; fi
check "the cut-off node says why" "etcd" "$out/$cut"
for w in $(cat "$out"/worker.$net.$(case $cut in a) echo 1;; b) echo 2;; c) echo 3;; esac)); do
  gone "$w" || { echo "FAILED: a worker of the cut-off node still runs"; fail=1; }
done
touch "$out/finish"
for p in $(eval echo "\$p$s1") $hp; do
  wait "$p" || { echo "FAILED: a node of the finished job exited $?"; fail=1; }
done
echo "ok: the job finished on the nodes left"
in_ns "$tag$cut" ip link set "v$tag$i" up

# 5. In-process recovery across the loss of the host: the workers' store is
# in etcd (each node's dtrun relays it), so the elected host's dtrun is
# killed and the two other nodes' workers keep their processes, move to the
# next round in place, and end with the loss of a run without the failure.
recov() {  # host, log, rdzv-id, flags...
  local h=$1 log=$2 id=$3; shift 3
  nsenter --net=/run/netns/"$tag$h" "$dtrun" --nproc-per-node=2 --nnodes=2:3 --rdzv-backend=etcd --rdzv="$members" \
    --rdzv-id="$id" --token=t --heartbeat-timeout=5 --rdzv-last-call=2 --rdzv-timeout=60 --max-restarts=0 "$@" \
    --env RTD_LOG=warn "$mlp" --steps 100 --optim adamw --lr 0.01 --log-every 10 --pace-ms 20 \
    --global-batch 12 $(case "$*" in *in-process*) echo --recover 1;; esac) >"$log" 2>&1 &
}
for h in a b c; do recov $h "$out/full.$h" job3; eval "q_$h=\$!"; pids="$pids $!"; done
if finish 120 "$q_a" "$q_b" "$q_c" "$out"/full.*; then
  want=$(grep -h "step 100 loss" "$out"/full.* | awk '{print $6}' | head -1)
else echo "FAILED: the run without a failure"; tail -n 20 "$out"/full.*; fail=1; want=; fi
for h in a b c; do recov $h "$out/rec.$h" job4 --recovery=in-process; eval "q_$h=\$!"; pids="$pids $!"; done
for _ in $(seq 300); do grep -q "step 30 loss" "$out"/rec.* && break; sleep 0.1; done
rhost=$(grep -l "elected to host" "$out"/rec.* | head -1); rhost=${rhost##*.}
set -- $(echo a b c | tr ' ' '\n' | grep -v "^$rhost$")
t0=$(date +%s%3N)
eval "kill -9 \$q_$rhost"
if eval "finish 120 \$q_$1 \$q_$2 \"$out/rec.$1\" \"$out/rec.$2\""; then echo "ok: the job finished on the two nodes left"; else
  echo "FAILED: a surviving node failed"; tail -n 30 "$out/rec.$1" "$out/rec.$2"; fail=1; fi
for h in "$1" "$2"; do
  check "node $h kept its workers across the host's loss" "rejoining, the workers kept" "$out/rec.$h"
  [ "$(grep -c " pid " "$out/rec.$h")" = 2 ] && echo "ok: node $h's workers kept their processes" ||
    { echo "FAILED: node $h's workers were started again"; fail=1; }
done
done_ms=$(grep -ho "completed after the resume at [0-9]*" "$out/rec.$1" "$out/rec.$2" | awk '{print $6}' | sort -n | head -1)
[ -n "$done_ms" ] && echo "info: from the kill of the host's dtrun to the first step after it: $(( done_ms - t0 )) ms"
got=$(grep -h "step 100 loss" "$out/rec.$1" "$out/rec.$2" | awk '{print $6}' | head -1)
if [ -n "$got" ] && [ -n "$want" ] && awk -v a="$got" -v b="$want" 'BEGIN{d=(a-b)/b; if (d<0) d=-d; exit !(d < 1e-6)}'; then
  echo "ok: the final loss $got is the unbroken run's $want to 1e-6"
else echo "FAILED: final loss '$got', without the failure '$want'"; fail=1; fi

train() {  # host, log, job: the trainer with checkpoints
  nsenter --net=/run/netns/"$tag$1" "$dtrun" --nproc-per-node=1 --nnodes=3 --rdzv-backend=etcd --rdzv="$members" \
    --rdzv-id="$3" --token=t --heartbeat-timeout=5 --rdzv-timeout=60 --env RTD_LOG=warn \
    "$mlp" --global-batch 12 --steps 100000 --pace-ms 20 --log-every 50 \
    --ckpt-dir "$out/ck_$3" --ckpt-every 10 >"$2" 2>&1 &
}
steps_in() { cat "$@" | grep -c " loss "; }

# 6. etcd paused: 2 s (under the 5 s timeout) is ridden out; a longer pause
# stops every node at its lease's TTL, saying so.
train a "$out/pa" job3; qa=$!
train b "$out/pb" job3; qb=$!
train c "$out/pc" job3; qc=$!
pids="$pids $qa $qb $qc"
for _ in $(seq 150); do cat "$out/pa" "$out/pb" "$out/pc" | grep -q "step 100 loss" && break; sleep 0.2; done
kill -STOP "$p1" "$p2" "$p3"; sleep 2; kill -CONT "$p1" "$p2" "$p3"
before=$(steps_in "$out/pa" "$out/pb" "$out/pc")
for _ in $(seq 50); do [ "$(steps_in "$out/pa" "$out/pb" "$out/pc")" -ge $((before + 2)) ] && break; sleep 0.2; done
if [ "$(steps_in "$out/pa" "$out/pb" "$out/pc")" -ge $((before + 2)) ] && running "$qa" && running "$qb" && running "$qc"
then echo "ok: a 2 s pause of etcd is ridden out"
else echo "FAILED: the job did not go on after a 2 s pause of etcd"; tail -n 5 "$out/pa" "$out/pb" "$out/pc"; fail=1; fi
kill -STOP "$p1" "$p2" "$p3"
paused=$(date +%s.%N)
for _ in $(seq 100); do [ "$(cat "$out/pa" "$out/pb" "$out/pc" | grep -c "job failed")" -ge 3 ] && break; sleep 0.2; done
kill -CONT "$p1" "$p2" "$p3"
for n in a b c; do
  eval "p=\$q$n"
  if gone "$p"; then wait "$p"; rc=$?; else rc=running; fi
  [ "$rc" != 0 ] && [ "$rc" != running ] && echo "ok: node $n stopped (exit $rc)" ||
    { echo "FAILED: node $n: exit $rc 20 s into a pause of etcd"; fail=1; }
  check "node $n says it lost its lease" "lost its lease in etcd" "$out/p$n"
  at=$(grep -m1 "lost its lease in etcd" "$out/p$n" | awk '{print $1, $2}')
  [ -n "$at" ] && echo "info: node $n found its lease lost $(awk "BEGIN{printf \"%.1f\", $(date -d "$at" +%s.%N) - $paused}") s into the pause"
  if grep -q "killed by signal 6" "$out/p$n"; then
    echo "FAILED: node $n blames a worker's abort"; grep "killed by signal" "$out/p$n" | head -2; fail=1
  fi
done

# 7. The trainer with checkpoints; two etcd members die: every node stops
# and says why, and the last checkpoint resumes.
healthy && echo "ok: etcd is healthy again after the pause" ||
  { echo "FAILED: etcd did not recover from the pause"; fail=1; }
train a "$out/ta" job2; pa=$!
train b "$out/tb" job2; pb=$!
train c "$out/tc" job2; pc=$!
pids="$pids $pa $pb $pc"
# Rank 0 (the elected host's worker) prints the loss.
for _ in $(seq 150); do cat "$out/ta" "$out/tb" "$out/tc" | grep -q "step 100 loss" && break; sleep 0.2; done
cat "$out/ta" "$out/tb" "$out/tc" | grep -q "step 100 loss" && echo "ok: the trainer runs" ||
  { echo "FAILED: the trainer did not reach step 100"; tail -n 5 "$out/ta" "$out/tb" "$out/tc"; fail=1; }
kill -9 "$p1" "$p2"
for p in $pa $pb $pc; do
  if gone "$p" || { sleep 15; ! running "$p"; }; then wait "$p"; rc=$?
    [ $rc -ne 0 ] && echo "ok: a node stopped (exit $rc)" || { echo "FAILED: a node exited 0"; fail=1; }
  else echo "FAILED: a node still runs after etcd lost its quorum"; fail=1; fi
done
# A node that finds its lease gone says so; its workers may say first that
# their store (in etcd) lost its quorum, or stop because their peers went.
cat "$out/ta" "$out/tb" "$out/tc" > "$out/tall"
if grep -qE "lost its lease in etcd|etcd at .* the cluster lost its quorum" "$out/tall"; then
  echo "ok: a node says etcd is gone"
else echo "FAILED: no node says etcd is gone"; cat "$out/tall"; fail=1; fi
in_ns "${tag}a" "$dtrun" --nproc-per-node=3 --env RTD_LOG=warn "$mlp" --global-batch 12 --steps 5 \
  --log-every 1 --ckpt-dir "$out/ck_job2" --ckpt-every 1000 >"$out/resume" 2>&1
rc=$?
[ $rc -eq 0 ] && echo "ok: the last checkpoint loads" || { echo "FAILED: resuming exited $rc"; cat "$out/resume"; fail=1; }
check "it resumed" "resumed from step" "$out/resume"
exit $fail
