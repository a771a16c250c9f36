# Shared by the network-namespace tests: skipping with a reason (exit 77),
# the preconditions, entering a namespace, and the check helper.
skip() { echo "SKIPPED: $*"; exit 77; }

require_netns() {
  [ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (ip netns)"
  command -v ip >/dev/null || skip "the 'ip' command (iproute2) is not installed"
}

# nsenter switches only the network namespace ('ip netns exec' also remounts
# /sys, which fails inside a chroot).
in_ns() { local ns=$1; shift; nsenter --net=/run/netns/"$ns" "$@"; }

fail=0
check() {  # name, expected substring, file
  if grep -qF -- "$2" "$3"; then echo "ok: $1"; else echo "FAILED: $1 (no '$2')"; cat "$3"; fail=1; fi
}
