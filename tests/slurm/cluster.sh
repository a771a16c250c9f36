#!/usr/bin/env bash
# A real Slurm on this one host: munged, slurmctld and two slurmd "nodes",
# each node in its own network, UTS and mount namespace (its own address and
# host name, and an /etc/hosts that names every node), joined by a bridge.
# Then the checks: dtrun under srun with no flags but --nproc-per-node, the
# trainer under srun alone (one task per worker, rank 0 hosting the store),
# and the deploy/slurm batch script through sbatch. Exits 77 (skipped),
# saying why, where Slurm's packages or namespaces are missing.
#   tests/slurm/cluster.sh DTRUN MLP_CPU
set -u
dtrun=$(readlink -f "$1") mlp=$(readlink -f "$2")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../netns/lib.sh"
require_netns
for tool in slurmctld slurmd munged srun sbatch scontrol unshare; do
  command -v $tool >/dev/null || skip "$tool is not installed (Debian: slurmctld slurmd slurm-client munge)"
done

tag=rts$$
dir=$(mktemp -d /tmp/rtd-slurm.XXXXXX)
chmod 755 "$dir"
cleanup() {
  for p in ${pids:-}; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in ${pids:-}; do kill -9 "$p" 2>/dev/null; done
  pkill -9 -f "$dir/slurm.conf" 2>/dev/null
  for ns in ${tag}ctl ${tag}a ${tag}b ${tag}br; do ip netns del "$ns" 2>/dev/null; done
  if [ "${fail:-1}" -ne 0 ]; then
    for f in "$dir"/*.log; do echo "== $f"; tail -n 30 "$f"; done
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

# The network: a bridge, the controller at .10, the nodes at .1 and .2.
bridge_hosts $tag 10.213.9 ctl:10 a:1 b:2
cat > "$dir/hosts" <<HOSTS
127.0.0.1 localhost
10.213.9.10 rtdctl
10.213.9.1 rtda
10.213.9.2 rtdb
HOSTS
chmod 644 "$dir/hosts"

# Runs a command as host NAME: its network namespace, its host name, the hosts file.
as_host() {
  local name=$1; shift
  nsenter --net=/run/netns/${tag}$name unshare --uts --mount --propagation private \
    sh -c 'hostname "$0"; mount --bind "$1" /etc/hosts; shift; exec "$@"' \
    "rtd$name" "$dir/hosts" "$@"
}

# munge, with its own key and socket.
mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
chmod 700 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/key" bs=1024 count=1 2>/dev/null
chmod 400 "$dir/munge/key"
munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/key" \
  --pid-file="$dir/munge/pid" --log-file="$dir/munge.log" --seed-file="$dir/munge/seed" \
  || { echo "FAILED: setup: munged is installed but does not start (see above)"; exit 1; }
pids="$(cat "$dir/munge/pid")"

cat > "$dir/slurm.conf" <<CONF
ClusterName=rtd
SlurmctldHost=rtdctl(10.213.9.10)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=rtda NodeAddr=10.213.9.1 CPUs=4 State=UNKNOWN
NodeName=rtdb NodeAddr=10.213.9.2 CPUs=4 State=UNKNOWN
PartitionName=rtd Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
as_host ctl slurmctld -D -i -f "$dir/slurm.conf" >"$dir/slurmctld.out.log" 2>&1 &
pids="$pids $!"
for n in a b; do
  as_host $n slurmd -D -N rtd$n -f "$dir/slurm.conf" >"$dir/slurmd.$n.out.log" 2>&1 &
  pids="$pids $!"
done
up=0
for _ in $(seq 100); do
  if as_host ctl sinfo -h -o '%t %D' 2>/dev/null | grep -q '^idle 2'; then up=1; break; fi
  sleep 0.3
done
[ $up -eq 1 ] || { echo "FAILED: the Slurm cluster did not come up"; as_host ctl sinfo; fail=1; exit 1; }
echo "ok: slurmctld and two slurmd nodes are up"

out=$dir/out
mkdir -p "$out"
# 1. dtrun under srun: one agent per node, nothing but --nproc-per-node.
as_host a srun -N2 --ntasks-per-node=1 --time=2 "$dtrun" --nproc-per-node=2 \
  sh -c 'echo rank $RANK of $WORLD_SIZE node $GROUP_RANK host $(hostname)' >"$out/dtrun" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAILED: srun dtrun exited $rc"; cat "$out/dtrun"; fail=1; }
check "dtrun under srun: node 0's first worker" "rank 0 of 4 node 0 host rtda" "$out/dtrun"
check "dtrun under srun: node 1's last worker" "rank 3 of 4 node 1 host rtdb" "$out/dtrun"
check "dtrun says where the placement came from" "under srun: node 1 of 2, rendezvous at rtda:" "$out/dtrun"

# 2. The trainer under srun alone: 2 nodes x 2 tasks, rank 0 hosts the store;
# its loss matches one process with the whole batch.
as_host a srun -N2 --ntasks-per-node=2 --time=2 "$mlp" --steps 30 --batch 8 --log-every 30 \
  >"$out/alone" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAILED: srun mlp_cpu exited $rc"; cat "$out/alone"; fail=1; }
"$dtrun" --nproc-per-node=1 "$mlp" --steps 30 --batch 32 --log-every 30 >"$out/single" 2>&1
two=$(grep -o 'step 30 loss [^ ]*' "$out/alone" | head -1)
one=$(grep -o 'step 30 loss [^ ]*' "$out/single")
if [ -n "$two" ] && [ -n "$one" ] && awk -v a="${two##* }" -v b="${one##* }" \
     'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= 1e-4 * m) }'; then
  echo "ok: srun alone, 4 tasks ($two) matches one process ($one)"
else
  echo "FAILED: srun alone '$two' vs one process '$one'"; cat "$out/alone"; fail=1
fi
check "rank 0 hosted the store under srun" "under slurm" "$out/alone"

# 3. The deploy/slurm batch script, as a user submits it.
job=$(as_host a sbatch --parsable -N2 --time=3 --output="$out/batch.%j" \
  --export=ALL,DTRUN="$dtrun",TRAIN="$mlp",NPROC_PER_NODE=2,TRAIN_ARGS="--steps 20 --log-every 20" \
  "$here/../../deploy/slurm/train.sbatch")
if [ -z "$job" ]; then echo "FAILED: sbatch"; fail=1; else
  for _ in $(seq 200); do
    state=$(as_host ctl scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z]*')
    case "$state" in *COMPLETED*|*FAILED*|*CANCELLED*|*TIMEOUT*) break ;; esac
    sleep 0.3
  done
  [ "$state" = "JobState=COMPLETED" ] && echo "ok: the batch job completed" \
    || { echo "FAILED: the batch job ended $state"; cat "$out"/batch.* 2>/dev/null; fail=1; }
  check "the batch job trained across 2 nodes" "world size 4" "$(ls "$out"/batch.* | head -1)"
fi
exit ${fail:-0}
