#!/usr/bin/env bash
# From the kill -9 of a node's dtrun to the first step completed after it,
# on CPU: 3 hosts in network namespaces × 2 workers (mlp_cpu, DDP over Gloo,
# --nnodes=2:3), host c killed after step 35. In-process recovery
# (--recovery=in-process, --recover 1: the survivors' workers move to the
# next round in place) against the restart of the survivors' workers from
# the last checkpoint (every 10 steps, on a directory the hosts share), in
# the same run; and both again on the etcd backend (a local etcd member,
# started here) when etcd is installed.
#   sudo bench/node_loss_time.sh DTRUN MLP_CPU [REPEATS=3]
set -u
dtrun=$1 mlp=$2 repeats=${3:-3}
. "$(dirname "$0")/../tests/netns/lib.sh"
require_netns
tag=rtb$$
cleanup() {
  for p in ${pids:-} ${etcd_pid:-}; do kill -9 "$p" 2>/dev/null; done
  for ns in ${tag}a ${tag}b ${tag}c ${tag}e ${tag}br; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "${out:-/nonexistent}"
}
trap cleanup EXIT
bridge_hosts $tag 10.216.3 a:1 b:2 c:3 e:9
out=$(mktemp -d)
backends="own"
if command -v etcd >/dev/null; then
  nsenter --net=/run/netns/${tag}e etcd --name e --data-dir "$out/etcd" \
    --listen-client-urls http://10.216.3.9:2379 --advertise-client-urls http://10.216.3.9:2379 \
    --listen-peer-urls http://10.216.3.9:2380 --initial-advertise-peer-urls http://10.216.3.9:2380 \
    --initial-cluster e=http://10.216.3.9:2380 >"$out/etcd.log" 2>&1 &
  etcd_pid=$!
  sleep 2
  backends="own etcd"
fi
run() {  # backend, mode, repeat: prints "kill_to_step_ms steps_redone"
  local backend=$1 mode=$2 i=$3 flags rdzv port
  # A port (and job id, and checkpoint directory) of its own per run.
  port=$((29700 + 10 * i + $([ "$mode" = restart ] && echo 1 || echo 0) + \
    $([ "$backend" = etcd ] && echo 100 || echo 0)))
  rdzv="--rdzv=10.216.3.1:$port"
  [ "$backend" = etcd ] && rdzv="--rdzv-backend=etcd --rdzv=10.216.3.9:2379 --rdzv-id=bench$port"
  if [ "$mode" = in-process ]; then flags="--recovery=in-process"; extra="--recover 1";
  else flags=""; extra="--ckpt-dir $out/ck$port --ckpt-every 10"; fi
  for h in a b c; do
    # shellcheck disable=SC2086
    nsenter --net=/run/netns/$tag$h "$dtrun" --nproc-per-node=2 --nnodes=2:3 $rdzv --token=t \
      --rdzv-timeout=60 --rdzv-last-call=2 --heartbeat-timeout=3 --max-restarts=0 $flags \
      --env RTD_LOG=warn "$mlp" --steps 80 --optim adamw --lr 0.01 --log-every 5 --pace-ms 20 \
      --global-batch 12 $extra >"$out/$mode.$backend.$i.$h" 2>&1 &
    eval "q_$h=\$!"
    pids="${pids:-} $!"
  done
  # The host of the rounds is a (own) or whoever etcd elected: kill c unless it hosts.
  local victim=c
  for _ in $(seq 300); do cat "$out/$mode.$backend.$i".* | grep -q "step 35 loss" && break; sleep 0.05; done
  grep -q "elected to host" "$out/$mode.$backend.$i.c" && victim=b
  local t0; t0=$(date +%s%3N)
  eval "kill -9 \$q_$victim"
  for h in a b c; do [ $h = $victim ] || eval "wait \$q_$h"; done
  local line done first
  line=$(cat "$out/$mode.$backend.$i".* | grep -o "step [0-9]* completed after the resume at [0-9]*" | head -1)
  first=$(echo "$line" | awk '{print $2}'); done=$(echo "$line" | awk '{print $8}')
  if [ -z "$done" ]; then
    for h in a b c; do tail -n 4 "$out/$mode.$backend.$i.$h" | sed "s/^/  $h: /" >&2; done
    echo "- -"; return
  fi
  local redone=$((35 - first + 1))
  [ $redone -lt 0 ] && redone=0  # step 36 completed before the kill
  echo "$((done - t0)) $redone"
}
printf "%-8s %-12s %4s %16s %14s\n" backend mode run kill_to_step_ms steps_redone
for backend in $backends; do
  for i in $(seq "$repeats"); do
    for mode in in-process restart; do
      read -r ms redone <<<"$(run $backend $mode $i)"
      printf "%-8s %-12s %4d %16s %14s\n" $backend $mode $i "$ms" "$redone"
      echo "{\"backend\":\"$backend\",\"mode\":\"$mode\",\"run\":$i,\"kill_to_step_ms\":\"$ms\",\"steps_redone\":\"$redone\"}" >>"$out/json"
    done
  done
done
cat "$out/json"
