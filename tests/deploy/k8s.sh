#!/usr/bin/env bash
# deploy/k8s/train.yaml's pods, without Kubernetes: its args line, run by
# /bin/sh -c with its env (the Secret's token made up here), for 2 pods as 2
# agents, each in its own network namespace (its address) and mount
# namespace (its /tmp, /etc/hosts resolving rtd-train-<i>.rtd-train as the
# headless Service does, the image's /opt/train, the shared /ckpt volume).
# Checks that pod 0 hosts the rendezvous, both finish, and the job's
# checkpoint of 4 ranks is in the shared volume. Exits 77 where namespaces
# cannot be made.
#   tests/deploy/k8s.sh DTRUN MLP_CPU
set -u
dtrun=$(readlink -f "$1") mlp=$(readlink -f "$2")
here=$(cd "$(dirname "$0")" && pwd)
manifest=$here/../../deploy/k8s/train.yaml
. "$here/../netns/lib.sh"
require_netns
command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
tag=k8s$$
work=$(mktemp -d)
made_ckpt=0
cleanup() {
  for p in ${pids:-}; do kill -9 "$p" 2>/dev/null; done
  [ $made_ckpt -eq 1 ] && rmdir /ckpt 2>/dev/null
  ip netns del "${tag}br" 2>/dev/null
  for i in 0 1; do ip netns del "${tag}p$i" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
bridge_hosts "$tag" 10.215.3 p0:10 p1:11

# The manifest's container: its args line and its env, as Kubernetes passes them.
args=$(grep -A1 '^ *args:' "$manifest" | tail -1 | sed 's/^ *- //')
[ -n "$args" ] || { echo "FAILED: no args line in $manifest"; exit 1; }
awk '/^ *- name: / { name = $3 } /^ *value: / { v = $0; sub(/^ *value: */, "", v); gsub(/"/, "", v); print name "=" v }' \
  "$manifest" | grep -E '^[A-Z_]+=' >"$work/env"
echo "DTRUN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" >>"$work/env"  # the Secret
cat >"$work/hosts" <<HOSTS
127.0.0.1 localhost
10.215.3.10 rtd-train-0.rtd-train
10.215.3.11 rtd-train-1.rtd-train
HOSTS
mkdir -p "$work/bin" "$work/ckpt" && ln -s "$dtrun" "$work/bin/dtrun"
# The volume's mount point, as the image has it (left empty; removed after).
[ -d /ckpt ] || { mkdir /ckpt && made_ckpt=1; }
echo "args: $args"
# The build trees' top directories under /tmp (the pods' /tmp hides the host's).
tmp_tops=$(for f in "$dtrun" "$mlp"; do case $f in /tmp/*) echo "$f" | cut -d/ -f3;; esac; done | sort -u | tr '\n' ' ')
pod() {  # index: the pod's container, in its namespaces
  local i=$1
  # The test's files reach the pod as /opt/pod (its /tmp is its own); a build
  # tree under /tmp is bound back into the pod's /tmp at the same path.
  in_ns "${tag}p$i" unshare -m sh -c "
    mount --make-rprivate / &&
    mount -t tmpfs none /opt && mkdir -p /opt/train /opt/pod /opt/host_tmp &&
    mount --bind '$work' /opt/pod && mount --bind /opt/pod/hosts /etc/hosts &&
    mount --bind /tmp /opt/host_tmp &&
    mount -t tmpfs none /tmp && mount --bind /opt/pod/ckpt /ckpt &&
    for top in $tmp_tops; do mkdir -p /tmp/\$top && mount --bind /opt/host_tmp/\$top /tmp/\$top; done &&
    ln -s '$mlp' /opt/train/mlp_cpu &&
    exec env -i PATH=/opt/pod/bin:/usr/bin:/bin HOSTNAME=rtd-train-$i JOB_COMPLETION_INDEX=$i \
      \$(cat /opt/pod/env) /bin/sh -c '$args'" >"$work/pod$i" 2>&1
}
pod 1 & p1=$!; pids="$p1"
pod 0 & p0=$!; pids="$pids $p0"
wait $p0; rc0=$?
wait $p1; rc1=$?
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { echo "FAILED: pods exited $rc0/$rc1"; tail -n 20 "$work/pod0" "$work/pod1"; fail=1; }
check "pod 0 hosts the rendezvous at its DNS name" "joined: node 0 of 2" "$work/pod0"
check "pod 1 joins it" "joined: node 1 of 2" "$work/pod1"
check "the trainer ran to its last step on 4 ranks" "step 200 loss" "$work/pod0"
check "the job's checkpoint is in the shared volume" '"world_size": 4' "$work/ckpt/rtd-train/step_00000200/manifest.json"
[ $fail -eq 0 ] && echo "k8s: all passed"
exit $fail
