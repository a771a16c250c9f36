#!/usr/bin/env bash
# The control plane over mutual TLS, between two hosts in network
# namespaces: certificates made here with openssl (a CA, a node certificate
# naming both hosts' addresses, and a rogue one from another CA). The CPU
# trainer runs on 2 nodes with --tls-* (its workers' store client speaks TLS
# too, from the DTRUN_TLS_* dtrun gives them); a node with the rogue
# certificate, and one without TLS, are refused with a message saying why;
# with --tls-peer-names, so is one whose certificate the CA signed for
# another name; the host's log names each refused node's address.
# Then the same through etcd (--rdzv-backend=etcd) requiring client
# certificates, where etcd is installed.
# Exits 77 (skipped) without root, iproute2 or openssl.
set -u
dtrun=$1 mlp=$2
. "$(dirname "$0")/lib.sh"
require_netns
command -v openssl >/dev/null || skip "openssl is not installed"

tag=rtt$$
hosts="${tag}a ${tag}b"
cleanup() {
  for p in ${pids:-}; do kill -9 "$p" 2>/dev/null; done
  for ns in $hosts ${tag}br; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "${out:-/nonexistent}"
}
trap cleanup EXIT
bridge_hosts $tag 10.213.11 a:1 b:2
set -- $hosts
a=$1 b=$2
out=$(mktemp -d)

# A CA, a node certificate for both hosts (server and client), and a rogue
# certificate for the same addresses from a CA the job does not trust.
certs() {  # CA name, certificate name
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$out/$1.key" -out "$out/$1.pem" -days 2 \
    -subj "/CN=$1" 2>/dev/null &&
  openssl req -newkey rsa:2048 -nodes -keyout "$out/$2.key" -out "$out/$2.csr" -subj "/CN=$2" \
    2>/dev/null &&
  printf 'subjectAltName=IP:10.213.11.1,IP:10.213.11.2,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' \
    >"$out/$2.ext" &&
  openssl x509 -req -in "$out/$2.csr" -CA "$out/$1.pem" -CAkey "$out/$1.key" -CAcreateserial \
    -out "$out/$2.pem" -days 2 -extfile "$out/$2.ext" 2>/dev/null
}
certs ca node || setup_failed "openssl could not make the certificates"
certs rogue_ca rogue || setup_failed "openssl could not make the rogue certificate"
tls() { echo "--tls-cert=$out/$1.pem --tls-key=$out/$1.key --tls-ca=$out/ca.pem"; }
node() {  # namespace, log, port, flags...
  local ns=$1 log=$2 port=$3
  shift 3
  nsenter --net=/run/netns/"$ns" "$dtrun" --nproc-per-node=2 --nnodes=2 \
    --rdzv=10.213.11.1:$port --token=t "$@" --env RTD_LOG=warn "$mlp" --steps 20 \
    --log-every 20 >"$log" 2>&1
}

# 1. Both nodes with the CA's certificate: the trainer runs to the end.
node "$a" "$out/a1" 29600 $(tls node) --rdzv-timeout=60 & pa=$!
pids="$pa"
node "$b" "$out/b1" 29600 $(tls node) --rdzv-timeout=60; rb=$?
wait $pa; ra=$?
if [ $ra -eq 0 ] && [ $rb -eq 0 ] && grep -q "step 20 loss" "$out/a1"; then
  echo "ok: the trainer ran on 2 nodes over mutual TLS"
else
  echo "FAILED: the TLS job exited $ra / $rb"; tail -n 5 "$out/a1" "$out/b1"; fail=1
fi

# 2. A node whose certificate another CA signed: refused, saying why.
node "$a" "$out/a2" 29601 $(tls node) --rdzv-timeout=8 & pa=$!
pids="$pids $pa"
node "$b" "$out/b2" 29601 --tls-cert="$out/rogue.pem" --tls-key="$out/rogue.key" \
  --tls-ca="$out/ca.pem" --rdzv-timeout=5; rb=$?
wait $pa; ra=$?
[ $rb -ne 0 ] && [ $ra -ne 0 ] && echo "ok: a wrong certificate ends the join (exit $rb), the host times out (exit $ra)" ||
  { echo "FAILED: with a wrong certificate the nodes exited $ra / $rb"; fail=1; }
check "the node with the wrong certificate says why" "the TLS handshake with it fails" "$out/b2"
check "the host names the refused node's address" "rendezvous: a connection from 10.213.11.2:" "$out/a2"
check "the host names who joined" "only 1 of 2 nodes joined" "$out/a2"

# 3. A node without TLS against a host that requires it.
node "$a" "$out/a3" 29602 $(tls node) --rdzv-timeout=8 & pa=$!
pids="$pids $pa"
node "$b" "$out/b3" 29602 --rdzv-timeout=5; rb=$?
wait $pa
[ $rb -ne 0 ] && echo "ok: a node without TLS is refused (exit $rb)" ||
  { echo "FAILED: a node without TLS joined"; fail=1; }
check "it is told the host may require TLS" "or the host requires TLS" "$out/b3"

# 4. Half the flags: refused before anything starts.
"$dtrun" --nnodes=2 --rdzv=10.213.11.1:29603 --tls-cert="$out/node.pem" true >"$out/half" 2>&1
[ $? -eq 2 ] && echo "ok: --tls-cert alone exits 2" || { echo "FAILED: --tls-cert alone"; fail=1; }
check "naming what is missing" "missing: --tls-key, --tls-ca" "$out/half"

# 4b. Pinned names (--tls-peer-names): a certificate the job's CA signed for
# another name is refused, where without pinning any the CA signed passes.
openssl req -newkey rsa:2048 -nodes -keyout "$out/other.key" -out "$out/other.csr" -subj "/CN=other" \
  2>/dev/null &&
  openssl x509 -req -in "$out/other.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
    -out "$out/other.pem" -days 2 -extfile "$out/node.ext" 2>/dev/null ||
  setup_failed "openssl could not make the second certificate"
other="--tls-cert=$out/other.pem --tls-key=$out/other.key --tls-ca=$out/ca.pem"
node "$a" "$out/a5" 29605 $(tls node) --tls-peer-names=node --rdzv-timeout=60 & pa=$!
pids="$pids $pa"
node "$b" "$out/b5" 29605 $(tls node) --tls-peer-names=node,spare --rdzv-timeout=60; rb=$?
wait $pa; ra=$?
[ $ra -eq 0 ] && [ $rb -eq 0 ] && echo "ok: both nodes' certificates name the pinned node" ||
  { echo "FAILED: pinned names, the right certificates: exit $ra / $rb"; tail -n 5 "$out/a5" "$out/b5"; fail=1; }
node "$a" "$out/a6" 29606 $(tls node) --tls-peer-names=node --rdzv-timeout=8 & pa=$!
pids="$pids $pa"
node "$b" "$out/b6" 29606 $other --tls-peer-names=node --rdzv-timeout=5; rb=$?
wait $pa; ra=$?
[ $rb -ne 0 ] && [ $ra -ne 0 ] && echo "ok: a certificate for another name is refused (exit $rb)" ||
  { echo "FAILED: a certificate for another name: exit $ra / $rb"; fail=1; }
check "the refused node says why" "the TLS handshake with it fails" "$out/b6"
check "the host names the node refused for its name" "rendezvous: a connection from 10.213.11.2:" "$out/a6"
"$dtrun" --nnodes=2 --rdzv=10.213.11.1:29607 --tls-peer-names=node true >"$out/pin_alone" 2>&1
[ $? -eq 2 ] && echo "ok: --tls-peer-names without the files exits 2" ||
  { echo "FAILED: --tls-peer-names alone"; fail=1; }
check "naming what it needs" "--tls-peer-names pins the names of TLS peers: it needs" "$out/pin_alone"

# 5. The etcd backend over TLS: etcd requires client certificates from the
# job's CA; both nodes reach it with the same --tls-* files (and the
# workers' store, relayed by each dtrun, stays on TLS); a node without them
# is refused, naming etcd.
if command -v etcd >/dev/null; then
  nsenter --net=/run/netns/"$a" etcd --name tls --data-dir "$out/etcd" \
    --listen-client-urls https://10.213.11.1:2379 --advertise-client-urls https://10.213.11.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster tls=http://127.0.0.1:2380 --client-cert-auth --trusted-ca-file "$out/ca.pem" \
    --cert-file "$out/node.pem" --key-file "$out/node.key" >"$out/etcd.log" 2>&1 &
  pids="$pids $!"
  up=0
  for _ in $(seq 100); do
    nsenter --net=/run/netns/"$b" env ETCDCTL_API=3 etcdctl --endpoints=https://10.213.11.1:2379 \
      --cacert "$out/ca.pem" --cert "$out/node.pem" --key "$out/node.key" --dial-timeout=1s \
      endpoint health >/dev/null 2>&1 && { up=1; break; }
    sleep 0.2
  done
  [ $up = 1 ] || { tail -n 5 "$out/etcd.log"; setup_failed "etcd with TLS did not start"; }
  enode() {  # namespace, log, flags...
    local ns=$1 log=$2
    shift 2
    nsenter --net=/run/netns/"$ns" "$dtrun" --nproc-per-node=2 --nnodes=2 --rdzv-backend=etcd \
      --rdzv=10.213.11.1:2379 --rdzv-id=tlsjob --token=t "$@" --env RTD_LOG=warn "$mlp" \
      --steps 20 --log-every 20 >"$log" 2>&1
  }
  enode "$a" "$out/e1a" $(tls node) --rdzv-timeout=60 & pa=$!
  pids="$pids $pa"
  enode "$b" "$out/e1b" $(tls node) --rdzv-timeout=60; rb=$?
  wait $pa; ra=$?
  if [ $ra -eq 0 ] && [ $rb -eq 0 ] && grep -q "step 20 loss" "$out/e1a" "$out/e1b"; then
    echo "ok: the trainer ran on 2 nodes through etcd over mutual TLS"
  else
    echo "FAILED: the etcd TLS job exited $ra / $rb"; tail -n 5 "$out/e1a" "$out/e1b"; fail=1
  fi
  enode "$b" "$out/e2b" --rdzv-timeout=10; rb=$?
  [ $rb -ne 0 ] && echo "ok: a node without the certificates is refused by etcd (exit $rb)" ||
    { echo "FAILED: a node without TLS reached etcd"; fail=1; }
  check "it names etcd" "etcd at 10.213.11.1:2379" "$out/e2b"
else
  echo "skipped: the etcd part (etcd is not installed)"
fi
exit $fail
