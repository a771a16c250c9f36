# Shared by the network-namespace tests: skipping with a reason (exit 77),
# the preconditions, entering a namespace, and the check helper.
skip() { echo "SKIPPED: $*"; exit 77; }
# The tools are there, yet they failed: that is a broken machine or test, not a skip.
setup_failed() { echo "FAILED: setup: $*"; exit 1; }

require_netns() {
  # Where namespaces cannot work (a chroot, a container without
  # CAP_SYS_ADMIN), turn these tests off by name; else a failed setup fails.
  [ "${RTD_NO_NETNS:-0}" = 1 ] && skip "RTD_NO_NETNS=1 turns the network-namespace tests off"
  [ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (ip netns)"
  command -v ip >/dev/null || skip "the 'ip' command (iproute2) is not installed"
}

# nsenter switches only the network namespace ('ip netns exec' also remounts
# /sys, which fails inside a chroot).
in_ns() { local ns=$1; shift; nsenter --net=/run/netns/"$ns" "$@"; }

# True while process $1 runs. A zombie has ended: its parent (a killed dtrun)
# is gone, and whoever adopted it may reap it only later.
running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

fail=0
# finish SECONDS PID... LOG...: waits for the dtruns; one still running after
# SECONDS is a hang: its logs' tails are shown (what it waited for) and it
# is killed, so that a stuck job fails the test with its reason instead of
# running into CTest's limit. Exits as the first non-zero exit status.
finish() {
  local limit=$1 pid rc=0 give_up
  shift
  local pids=() logs=()
  for a in "$@"; do
    if [[ $a =~ ^[0-9]+$ ]]; then pids+=("$a"); else logs+=("$a"); fi
  done
  give_up=$((SECONDS + limit))
  for pid in "${pids[@]}"; do
    while running "$pid" && [ $SECONDS -lt $give_up ]; do sleep 0.2; done
    if running "$pid"; then
      echo "FAILED: a dtrun still ran after ${limit} s; its logs end with:"
      tail -n 15 "${logs[@]}"
      kill -9 "${pids[@]}" 2>/dev/null
      rc=1
      break
    fi
    wait "$pid"
    local status=$?
    [ $status -ne 0 ] && [ $rc -eq 0 ] && rc=$status
  done
  return $rc
}
wait_for() {  # what, file...: waits up to 30 s for every file to hold it
  local what=$1; shift
  for _ in $(seq 150); do
    local all=1
    for f in "$@"; do grep -qF -- "$what" "$f" 2>/dev/null || all=0; done
    [ $all -eq 1 ] && { echo "ok: '$what' in $#"; return 0; }
    sleep 0.2
  done
  echo "FAILED: '$what' did not appear in every log"; tail -n 20 "$@"; fail=1; return 1
}
check() {  # name, expected substring, file
  if grep -qF -- "$2" "$3"; then echo "ok: $1"; else echo "FAILED: $1 (no '$2')"; cat "$3"; fail=1; fi
}

# Hosts on one bridge: bridge_hosts TAG SUBNET NAME:LAST... makes the
# namespace TAGbr holding a bridge, and for each NAME the namespace TAGNAME
# with address SUBNET.LAST/24 on a veth into the bridge. Fails where this
# machine cannot (require_netns skips where the tools or root are missing).
# The caller deletes TAGbr and TAGNAME... at the end.
bridge_hosts() {
  local tag=$1 subnet=$2; shift 2
  ip netns add "${tag}br" || setup_failed "'ip netns add' failed (as root, with iproute2 installed)"
  in_ns "${tag}br" true || setup_failed "cannot enter a network namespace with nsenter"
  ip -n "${tag}br" link add br0 type bridge || setup_failed "cannot make a bridge"
  ip -n "${tag}br" link set br0 up
  local i=0 pair name ns
  for pair in "$@"; do
    name=${pair%%:*}
    ns=$tag$name
    ip netns add "$ns" || setup_failed "'ip netns add $ns' failed"
    ip link add "v$tag$i" type veth peer name "p$tag$i" || setup_failed "cannot make a veth pair"
    ip link set "v$tag$i" netns "$ns"
    ip link set "p$tag$i" netns "${tag}br"
    ip -n "${tag}br" link set "p$tag$i" master br0 up
    in_ns "$ns" ip addr add "$subnet.${pair##*:}/24" dev "v$tag$i"
    in_ns "$ns" ip link set "v$tag$i" up
    in_ns "$ns" ip link set lo up
    i=$((i + 1))
  done
}
