#!/usr/bin/env bash
# The MPI backend (RTD_BACKEND=mpi) against Gloo, under Open MPI's mpirun:
# the CPU trainer's DDP and ZeRO-3 steps give the same loss on both (on 2
# ranks bit for bit, the final weights too: a sum of two is the same in any
# order; on 3 to 1e-6, the sums' order differs), and the backend refuses
# what it cannot do with a message naming the fix: a job not started by
# mpirun. Exits 77 (skipped) where mpirun is missing.
#   tests/multiproc/mpi_backend.sh MLP_CPU DTRUN
set -u
mlp=$1 dtrun=$2
command -v mpirun >/dev/null || { echo "skipped: mpirun not found"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
train() {  # log, ranks, backend, trainer flags...
  local log=$1 n=$2 backend=$3
  shift 3
  # --allow-run-as-root: CI runs as root; --oversubscribe: more ranks than cores.
  RTD_BACKEND=$backend mpirun --allow-run-as-root --oversubscribe -np "$n" -x RTD_BACKEND \
    -x RTD_TIMEOUT_S=60 -x RTD_LOG=warn "$mlp" --steps 20 --optim adamw --log-every 20 "$@" \
    >"$out/$log" 2>&1 || { echo "FAILED: $log exited $?"; tail -5 "$out/$log"; fail=1; }
}
loss() { grep -o "step 20 loss [^ ]*" "$out/$1" | awk '{print $4}' | head -1; }
hash_of() { grep -o "final weights fnv1a [0-9a-f]*" "$out/$1" | awk '{print $4}' | head -1; }
for shard in ddp zero3; do
  flags=()
  [ $shard = zero3 ] && flags=(--shard zero3)
  for n in 2 3; do
    train "$shard.$n.gloo" "$n" gloo "${flags[@]}"
    train "$shard.$n.mpi" "$n" mpi "${flags[@]}"
    a=$(loss "$shard.$n.gloo") b=$(loss "$shard.$n.mpi")
    tol=0
    [ "$n" -gt 2 ] && tol=1e-6
    if [ -n "$a" ] && [ -n "$b" ] &&
      awk -v a="$a" -v b="$b" -v t="$tol" 'BEGIN{d=(a-b)/a; if (d<0) d=-d; exit !(d <= t)}'; then
      echo "ok: $shard on $n ranks: the loss at step 20 on MPI ($b) is Gloo's ($a) to $tol"
    else
      echo "FAILED: $shard on $n ranks: loss '$b' on MPI, '$a' on Gloo"; fail=1
    fi
  done
done
a=$(hash_of ddp.2.gloo) b=$(hash_of ddp.2.mpi)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "ok: DDP on 2 ranks: the same final weights on both ($a)" ||
  { echo "FAILED: DDP on 2 ranks: final weights '$b' on MPI, '$a' on Gloo"; fail=1; }
grep -q "mpi: gathers by all_gather" "$out/zero3.2.mpi" && echo "ok: ZeRO-3 ran on the MPI communicator" ||
  { echo "FAILED: ZeRO-3 did not say it ran on MPI"; grep -h "zero3:" "$out/zero3.2.mpi"; fail=1; }

# Under dtrun, MPI's world is not the job's: refused at init, saying how to start it.
"$dtrun" --nproc-per-node=2 --env RTD_BACKEND=mpi --env RTD_LOG=warn "$mlp" --steps 2 \
  >"$out/dtrun" 2>&1 && { echo "FAILED: RTD_BACKEND=mpi ran under dtrun"; fail=1; }
grep -q "RTD_BACKEND=mpi needs a job started by mpirun" "$out/dtrun" &&
  echo "ok: RTD_BACKEND=mpi under dtrun is refused, naming mpirun" ||
  { echo "FAILED: no clear refusal under dtrun"; tail -5 "$out/dtrun"; fail=1; }
exit $fail
