#!/usr/bin/env bash
# The MPI backend through UCX between two hosts (network namespaces on one
# bridge): mpirun in host a starts a rank there and one in host b (its
# remote agent enters b's namespace), Open MPI's UCX messaging layer
# (--mca pml ucx) over UCX's TCP transport on the veths. UCX's own log must
# show the ranks' endpoints on its TCP transport over the veth; every
# element must be right; the trainer's DDP steps give the same final weights
# as on Gloo over the same link. The busbw of both, in the same run, is
# printed (tests do not time: 411ccc3:docs/benchmarks.md holds the figures).
# Exits 77 (skipped) without root, iproute2 or mpirun.
set -u
bench=$1 mlp=$2
. "$(dirname "$0")/lib.sh"
require_netns
command -v mpirun >/dev/null || skip "mpirun is not installed (deploy/install_deps.sh installs openmpi-bin)"

tag=rtu$$
cleanup() {
  for ns in ${tag}a ${tag}b ${tag}br; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "${out:-/nonexistent}"
}
trap cleanup EXIT
net=10.218.5
bridge_hosts $tag $net a:1 b:2
out=$(mktemp -d)
# mpirun's remote agent: "agent [options] HOST COMMAND": the command runs in
# that host's namespace (ip netns exec: its own /sys, so that UCX sees the
# veth), told its address (DTRUN_ADDR: the hostname is the same in both).
cat >"$out/agent" <<AGENT
#!/usr/bin/env bash
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in $net.1) ns=${tag}a;; $net.2) ns=${tag}b;; *) exit 1;; esac
exec ip netns exec "\$ns" env DTRUN_ADDR="\$host" sh -c "\$*"
AGENT
chmod +x "$out/agent"
mpi() {  # log, mpirun flags and program...
  local log=$1; shift
  ip netns exec ${tag}a env DTRUN_ADDR=$net.1 timeout 300 mpirun --allow-run-as-root \
    --host $net.1:1,$net.2:1 -np 2 --mca plm_rsh_agent "$out/agent" \
    --mca oob_tcp_if_include $net.0/24 --mca btl_tcp_if_include $net.0/24 \
    -x RTD_LOG=warn -x RTD_TIMEOUT_S=60 "$@" >"$out/$log" 2>&1
}
ucx=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS=tcp
     -x "UCX_NET_DEVICES=v${tag}0,v${tag}1" -x UCX_LOG_LEVEL=info -x RTD_BACKEND=mpi)
sweep=(--ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 64K
       --max-bytes 16M --iters 5 --blocks 3)

mpi bench_mpi "${ucx[@]}" "$bench" --mode mpi "${sweep[@]}" ||
  { echo "FAILED: the MPI backend's sweep through UCX exited $?"; tail -20 "$out/bench_mpi"; exit 1; }
check "the sweep ran on the MPI communicator" "our mpi communicator" "$out/bench_mpi"
for v in 0 1; do
  check "UCX carried rank traffic on its TCP transport over veth $v" "tag(tcp/v${tag}$v)" "$out/bench_mpi"
done
bad=$(awk '$1 ~ /^(all_reduce|all_gather|reduce_scatter)$/ && $8 != 0' "$out/bench_mpi" | wc -l)
[ "$bad" = 0 ] && echo "ok: every element right through UCX" || { echo "FAILED: $bad rows with wrong elements"; fail=1; }
mpi bench_gloo "$bench" --mode gloo "${sweep[@]}" ||
  { echo "FAILED: the Gloo sweep exited $?"; tail -20 "$out/bench_gloo"; exit 1; }
echo "info: busbw (GB/s) over the same veth, MPI through UCX's TCP | Gloo:"
join <(awk '$1 ~ /^(all_reduce|all_gather|reduce_scatter)$/ {print $1"/"$3, $7}' "$out/bench_mpi" | sort) \
     <(awk '$1 ~ /^(all_reduce|all_gather|reduce_scatter)$/ {print $1"/"$3, $7}' "$out/bench_gloo" | sort) |
  sort -t/ -k1,1 -k2n | sed 's/^/info:   /'

# The trainer's DDP across the two hosts: the same final weights on both backends.
train=(--steps 10 --optim adamw --log-every 10)
mpi mlp_mpi "${ucx[@]}" "$mlp" "${train[@]}" || { echo "FAILED: mlp_cpu on MPI"; tail -5 "$out/mlp_mpi"; fail=1; }
mpi mlp_gloo "$mlp" "${train[@]}" || { echo "FAILED: mlp_cpu on Gloo"; tail -5 "$out/mlp_gloo"; fail=1; }
a=$(grep -o "final weights fnv1a [0-9a-f]*" "$out/mlp_gloo" | awk '{print $4}')
b=$(grep -o "final weights fnv1a [0-9a-f]*" "$out/mlp_mpi" | awk '{print $4}')
[ -n "$a" ] && [ "$a" = "$b" ] && echo "ok: DDP across the hosts: the same final weights through UCX as on Gloo ($a)" ||
  { echo "FAILED: final weights '$b' through UCX, '$a' on Gloo"; fail=1; }
exit $fail
