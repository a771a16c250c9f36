#!/usr/bin/env bash
# Two hosts in network namespaces joined by a veth pair: dtrun on each, node
# rank 0 hosting the rendezvous on its veth address. Runs the collective tests
# across hosts (2 nodes x 2 workers; FSDP's hybrid tests among them), the CPU
# trainer (data parallel, and hybrid sharding 2 x 2), and checks that a
# node started with a different --nproc-per-node fails on both sides.
# Exits 77 (skipped) without root or iproute2; a namespace that cannot be
# made with them is a failure.
set -u
dtrun=$1 collectives=$2 mlp=$3

. "$(dirname "$0")/lib.sh"
require_netns

tag=rtd$$
a=${tag}a b=${tag}b
cleanup() {
  for p in ${pids:-}; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$a" || setup_failed "'ip netns add' failed (as root, with iproute2 installed)"
ip netns add "$b" || setup_failed "a second 'ip netns add' failed"
in_a() { in_ns "$a" "$@"; }
in_b() { in_ns "$b" "$@"; }
# NAME, then one command run on both hosts (host 1 with b_env's KEY=VALUE
# words in its environment): host 0's in the background, host 1's in front,
# their output in $out/NAME0 and NAME1, their exit codes in rc0 and rc1.
on_both() {
  local name=$1 p
  shift
  in_a "$@" >"$out/${name}0" 2>&1 &
  p=$!; pids="${pids:-} $p"
  in_b env ${b_env:-} "$@" >"$out/${name}1" 2>&1
  rc1=$?
  wait $p; rc0=$?
}
in_a true || setup_failed "cannot enter a network namespace with nsenter"
ip link add "v${tag}a" type veth peer name "v${tag}b" || setup_failed "cannot make a veth pair"
ip link set "v${tag}a" netns "$a"
ip link set "v${tag}b" netns "$b"
in_a ip addr add 10.213.7.1/24 dev "v${tag}a"
in_b ip addr add 10.213.7.2/24 dev "v${tag}b"
for ns in "$a" "$b"; do
  nsenter --net=/run/netns/"$ns" ip link set lo up
done
in_a ip link set "v${tag}a" up
in_b ip link set "v${tag}b" up

# name, the job's log (node 0), the one-worker log, the other node's log:
# the loss after 30 steps agrees to 1e-4.
same_loss() {
  local two one
  two=$(grep -o 'step 30 loss [^ ]*' "$2")
  one=$(grep -o 'step 30 loss [^ ]*' "$3")
  if [ -n "$two" ] && [ -n "$one" ] && awk -v a="${two##* }" -v b="${one##* }" \
       'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= 1e-4 * m) }'; then
    echo "ok: $1 ($two) matches one worker ($one)"
  else
    echo "FAILED: $1 '$two' vs one worker '$one'"; cat "$2" "$4"; fail=1
  fi
}
out=$(mktemp -d)
rdzv="--rdzv=10.213.7.1:29400 --token=netns-test --rdzv-timeout=60"

# 1. Every collective across the two hosts, world of 4.
in_a "$dtrun" --nnodes=2 --node-rank=0 --nproc-per-node=2 $rdzv \
  --env RTD_TIMEOUT_S=60 --env RTD_LOG=warn "$collectives" >"$out/c0" 2>&1 &
p0=$!; pids="${pids:-} $p0"
in_b "$dtrun" --nnodes=2 --node-rank=1 --nproc-per-node=2 $rdzv \
  --env RTD_TIMEOUT_S=60 --env RTD_LOG=warn "$collectives" >"$out/c1" 2>&1
rc1=$?
wait $p0; rc0=$?
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { echo "FAILED: collectives across hosts rc=$rc0/$rc1"; tail -n 30 "$out/c0" "$out/c1"; fail=1; }
check "rank 3 ran on the second host" "[rank 3]: [  PASSED  ]" "$out/c1"
check "rank 0 ran on the first host" "[rank 0]: [  PASSED  ]" "$out/c0"

# 2. The trainer across hosts matches one worker with the whole batch.
in_a "$dtrun" --nnodes=2 --node-rank=0 --nproc-per-node=1 $rdzv \
  "$mlp" --steps 30 --batch 16 --log-every 30 >"$out/m0" 2>&1 &
p0=$!; pids="${pids:-} $p0"
in_b "$dtrun" --nnodes=2 --node-rank=1 --nproc-per-node=1 $rdzv \
  "$mlp" --steps 30 --batch 16 --log-every 30 >"$out/m1" 2>&1
wait $p0
"$dtrun" --nproc-per-node=1 "$mlp" --steps 30 --batch 32 --log-every 30 >"$out/single" 2>&1
same_loss "trainer across hosts" "$out/m0" "$out/single" "$out/m1"

# 2b. Hybrid sharding across the hosts: each host's two workers shard the
# weights between them (LOCAL_WORLD_SIZE) and the hosts replicate; the loss
# matches one worker with the whole batch.
for node in 0 1; do
  ns=$a; [ $node -eq 1 ] && ns=$b
  nsenter --net=/run/netns/"$ns" "$dtrun" --nnodes=2 --node-rank=$node --nproc-per-node=2 $rdzv \
    "$mlp" --steps 30 --batch 8 --log-every 30 --shard hybrid --lr 0.01 >"$out/h$node" 2>&1 &
  pids="${pids:-} $!"
done
wait
"$dtrun" --nproc-per-node=1 "$mlp" --steps 30 --batch 32 --log-every 30 --shard zero3 --lr 0.01 \
  >"$out/hsingle" 2>&1
same_loss "hybrid on 2 hosts x 2 workers" "$out/h0" "$out/hsingle" "$out/h1"
check "hybrid shards within each host and replicates across" "sharded over 2 ranks, replicated over 2 groups" "$out/h0"

# 3. Nodes that disagree fail together, with the reason, on both hosts.
in_a "$dtrun" --nnodes=2 --node-rank=0 --nproc-per-node=2 $rdzv true >"$out/d0" 2>&1 &
p0=$!; pids="${pids:-} $p0"
in_b "$dtrun" --nnodes=2 --node-rank=1 --nproc-per-node=1 $rdzv true >"$out/d1" 2>&1
rc1=$?
wait $p0; rc0=$?
[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] || { echo "FAILED: disagreeing nodes exited $rc0/$rc1"; fail=1; }
check "host 1 names the flag" "--nproc-per-node=1 but node rank 0 with --nproc-per-node=2" "$out/d1"
check "host 0 names the flag" "--nproc-per-node=1 but node rank 0 with --nproc-per-node=2" "$out/d0"

# 4. The rendezvous listens only on its own address: not on the host's loopback.
in_a "$dtrun" --nnodes=2 --node-rank=0 --nproc-per-node=1 --rdzv=10.213.7.1:29401 \
  --token=t --rdzv-timeout=4 true >"$out/b0" 2>&1 &
p0=$!; pids="${pids:-} $p0"
sleep 1
in_a "$dtrun" --nnodes=2 --node-rank=1 --nproc-per-node=1 --rdzv=127.0.0.1:29401 \
  --token=t --rdzv-timeout=2 true >"$out/b1" 2>&1
wait $p0
check "loopback of the rendezvous host is refused" "could not reach the rendezvous at 127.0.0.1:29401" "$out/b1"

# 5. The usage line as typed on each host: no --node-rank, no token. The host
# that owns the --rdzv address hosts it; both warn once that the control
# plane is unauthenticated.
usage="--nproc-per-node=2 --nnodes=2 --rdzv=10.213.7.1:29402 --rdzv-timeout=30"
show='echo rank $RANK of $WORLD_SIZE on node $GROUP_RANK'
on_both u "$dtrun" $usage sh -c "$show"
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { echo "FAILED: the usage line as typed exited $rc0/$rc1"; cat "$out/u0" "$out/u1"; fail=1; }
check "the host owning --rdzv is node 0" "rank 0 of 4 on node 0" "$out/u0"
check "the other host joins as node 1" "rank 3 of 4 on node 1" "$out/u1"
check "host 0 warns about the token" "unauthenticated" "$out/u0"
check "host 1 warns about the token" "unauthenticated" "$out/u1"

# 5b. The nodes compare their NCCL settings: NCCL_PROTO forced on one host
# only fails the job on both, naming each host's value; NCCL_DEBUG on one
# host only is a warning and the job runs; --nccl-preset's values reach the
# workers, and the user's own value wins.
settings() {  # log prefix, then env assignments for host 1 ("-" for none)
  local name=$1 extra=$2
  in_a "$dtrun" --nnodes=2 --node-rank=0 --nproc-per-node=1 $rdzv --nccl-preset=tcp \
    sh -c 'echo threads=$NCCL_SOCKET_NTHREADS ib=$NCCL_IB_DISABLE' >"$out/${name}0" 2>&1 &
  p0=$!; pids="${pids:-} $p0"
  if [ "$extra" = - ]; then extra=; fi
  in_b env $extra "$dtrun" --nnodes=2 --node-rank=1 --nproc-per-node=1 $rdzv --nccl-preset=tcp \
    --env NCCL_SOCKET_NTHREADS=2 sh -c 'echo threads=$NCCL_SOCKET_NTHREADS ib=$NCCL_IB_DISABLE' \
    >"$out/${name}1" 2>&1
  rc1=$?
  wait $p0; rc0=$?
}
settings s NCCL_PROTO=LL
[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] || { echo "FAILED: differing NCCL_PROTO exited $rc0/$rc1"; fail=1; }
check "host 0 names each host's NCCL_PROTO" "NCCL_PROTO: (unset) on node 0; LL on node 1" "$out/s0"
check "host 1 names each host's NCCL_PROTO" "NCCL_PROTO: (unset) on node 0; LL on node 1" "$out/s1"
settings w NCCL_DEBUG=WARN
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { echo "FAILED: differing NCCL_DEBUG exited $rc0/$rc1"; cat "$out/w0" "$out/w1"; fail=1; }
check "NCCL_DEBUG on one host only is a warning" "NCCL_DEBUG: (unset) on node 0; WARN on node 1" "$out/w0"
check "the preset reaches the workers" "threads=4 ib=1" "$out/w0"
check "--env wins over the preset" "threads=2 ib=1" "$out/w1"
check "what the user kept is logged" "kept your own NCCL_SOCKET_NTHREADS=2 (preset: 4)" "$out/w1"
# dtrun doctor across the hosts: node 0 prints both nodes' findings, the
# differing NCCL_PROTO an error on both.
b_env=NCCL_PROTO=Simple on_both doc "$dtrun" doctor --nnodes=2 --nproc-per-node=1 $rdzv
[ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] || { echo "FAILED: doctor across hosts exited $rc0/$rc1"; cat "$out/doc0" "$out/doc1"; fail=1; }
check "doctor on node 0 reports both nodes" "dtrun doctor across 2 nodes" "$out/doc0"
check "doctor names node 1's interface" "1    ok     v${tag}b" "$out/doc0"
check "doctor names the differing setting" "NCCL_PROTO: (unset) on node 0; Simple on node 1" "$out/doc0"
check "node 1 reports to node 0, and hears of the errors" "(reported to node 0; some node has errors: see node 0)" "$out/doc1"
# ... and --bench: the workers time an all-reduce across both hosts and within each.
on_both bench "$dtrun" doctor --bench --nnodes=2 --nproc-per-node=2 $rdzv
check "doctor --bench across the hosts" "all-reduce of 8 MiB through gloo, 4 workers on 2 node(s)" "$out/bench0"
check "doctor --bench within node 1" "within node 1" "$out/bench0"

# 6. A partition: the link goes down under a running job. Each side notices
# within --heartbeat-timeout (3 s here; the command limit is 40 s, and the
# gRPC call deadline alone would be 60 s).
hb="--nproc-per-node=1 --nnodes=2 --rdzv=10.213.7.1:29403 --token=t --heartbeat-timeout=3"
in_a timeout -k 5 40 "$dtrun" $hb sleep 120 >"$out/p0" 2>&1 &
p0=$!; pids="${pids:-} $p0"
in_b timeout -k 5 40 "$dtrun" $hb sleep 120 >"$out/p1" 2>&1 &
p1=$!; pids="${pids:-} $p1"
for i in $(seq 50); do grep -q joined "$out/p1" && grep -q joined "$out/p0" && break; sleep 0.2; done
sleep 1
in_b ip link set "v${tag}b" down
wait $p1; rc1=$?
wait $p0; rc0=$?
[ $rc1 -ne 124 ] && [ $rc1 -ne 0 ] || { echo "FAILED: node 1 did not notice the partition (rc $rc1)"; cat "$out/p1"; fail=1; }
[ $rc0 -ne 124 ] && [ $rc0 -ne 0 ] || { echo "FAILED: node 0 did not notice the partition (rc $rc0)"; cat "$out/p0"; fail=1; }
check "node 1 says it lost the rendezvous host" "lost contact with the rendezvous host" "$out/p1"
check "node 0 says node 1 went silent" "node 1 (10.213.7.2) has not been heard from" "$out/p0"

rm -rf "$out"
exit $fail
