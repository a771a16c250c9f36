#!/usr/bin/env bash
# From typing dtrun to the first completed all-reduce, on GPUs: our
# communicator (--mode ours) against NCCL called directly (--mode raw: our
# store carries NCCL's unique id, nothing else of ours), alternating, in the
# same run; and where the time goes: dtrun's own start and rendezvous, the
# worker process's start, init() (the store, then the communicator: NCCL's
# own initialization apart), the first all-reduce.
#   [MODES="raw ours ours_split"] bench/startup_time.sh DTRUN COLLECTIVE_BENCH [NPROC=2] [REPEATS=3]
# MODES (default "raw ours"): ours_split is ours with RTD_NCCL_DIRECT_INIT=0
# (a nonblocking init communicator and the blocking one split off it).
# Prints a table and one JSON line per run.
set -u
dtrun=$1 bench=$2 nproc=${3:-2} repeats=${4:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ms() { date +%s%3N; }
printf "%-11s %4s %9s %11s %13s %9s %9s %9s %9s %12s\n" mode run total_ms to_worker_ms worker_init_ms store_ms comm_ms nccl_ms split_ms first_op_ms
for i in $(seq "$repeats"); do
  for mode in ${MODES:-raw ours}; do
    direct=1
    [ "$mode" = ours_split ] && direct=0
    t0=$(ms)
    "$dtrun" --nproc-per-node="$nproc" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn,runtime:info,nccl:info \
      --env RTD_NCCL_DIRECT_INIT=$direct "$bench" --mode "${mode%_split}" --startup >"$out/$mode$i" 2>&1 ||
      { echo "$mode run failed"; tail -20 "$out/$mode$i"; exit 1; }
    read -r start ready first <<<"$(grep -o "process started at [0-9]* ms, init returned at [0-9]* ms, first all_reduce completed at [0-9]*" "$out/$mode$i" |
      awk '{print $4, $9, $15}')"
    # rank 0's init breakdown: the store, the communicator, NCCL's own part
    # of it and of that the split (ours; raw mode's NCCL is not ours to log)
    store=$(grep -h "\[rank 0\]" "$out/$mode$i" | grep -o "the store [0-9]* ms" | awk '{print $3}' | head -1)
    comm=$(grep -h "\[rank 0\]" "$out/$mode$i" | grep -o "communicator [0-9]* ms" | awk '{print $2}' | head -1)
    nccl=$(grep -h "\[rank 0\]" "$out/$mode$i" | grep -o "([0-9]* ms of it NCCL's own" | tr -d '(' | awk '{print $1}' | head -1)
    split=$(grep -h "\[rank 0\]" "$out/$mode$i" | grep -o "[0-9]* ms the blocking one split" | awk '{print $1}' | head -1)
    printf "%-11s %4d %9d %11d %13d %9s %9s %9s %9s %12d\n" "$mode" "$i" $((first - t0)) $((start - t0)) \
      $((ready - start)) "${store:--}" "${comm:--}" "${nccl:--}" "${split:--}" $((first - ready))
    echo "{\"mode\":\"$mode\",\"run\":$i,\"nproc\":$nproc,\"total_ms\":$((first - t0)),\"to_worker_ms\":$((start - t0)),\"worker_init_ms\":$((ready - start)),\"store_ms\":\"${store:-}\",\"comm_ms\":\"${comm:-}\",\"nccl_ms\":\"${nccl:-}\",\"split_ms\":\"${split:-}\",\"first_op_ms\":$((first - ready))}" >>"$out/json"
  done
done
cat "$out/json"
