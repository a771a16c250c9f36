#!/usr/bin/env bash
# In-process recovery across hosts: two hosts in network namespaces, 2
# workers each (mlp_cpu, DDP over Gloo on TCP). The last worker of host b
# kills itself at step 20; its dtrun starts it again alone, the three others
# keep their processes, and the job ends with the weights of a run without
# the failure, bit for bit. Exits 77 (skipped) without root or iproute2.
set -u
dtrun=$1 mlp=$2
. "$(dirname "$0")/lib.sh"
require_netns

tag=rtr$$
cleanup() {
  for p in ${pids:-}; do kill -9 "$p" 2>/dev/null; done
  for ns in ${tag}a ${tag}b ${tag}br; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "${out:-/nonexistent}"
}
trap cleanup EXIT
bridge_hosts $tag 10.215.7 a:1 b:2
out=$(mktemp -d)
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
  wait "$p_a" && wait "$p_b"
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
for r in 0 1; do
  [ "$(grep -c "rank $r pid" "$out/rec.a")" = 1 ] && echo "ok: rank $r kept its process" ||
    { echo "FAILED: rank $r started again"; fail=1; }
done
got=$(hash_of "$out"/rec.*)
[ -n "$got" ] && [ "$got" = "$want" ] && echo "ok: the final weights equal the unbroken run's ($got)" ||
  { echo "FAILED: final weights '$got', without the failure '$want'"; fail=1; }
exit $fail
