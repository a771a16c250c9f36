#!/usr/bin/env bash
# rtd-plan as typed: a plan worked out by hand (2 ranks, ZeRO-1, one 4096-element
# unit: 8 KiB of fp32 master shard, 16 KiB of moments, 8 KiB of gradient shard,
# 4 B of scalar, 16 KiB of parameters and of gradients in full), a 7B model on
# 8 ranks, and what it refuses. That the plan is what the engine allocates,
# for every strategy and option, is tests/multiproc/fsdp_test.cc's.
#   tests/plan/rtd_plan.sh RTD_PLAN
set -u
plan=$1
fail=0
expect() {  # what, wanted exit code, text wanted in the output, rtd-plan args...
  local what=$1 code=$2 text=$3; shift 3
  local out rc
  out=$("$plan" "$@" 2>&1); rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: $what: exit $rc (wanted $code), wanted '$text' in:"; echo "$out"; fail=1
  else
    echo "ok: $what"
  fi
}
expect "ZeRO-1 by hand" 0 "total                         64.0 KiB per rank (sharded over 2 ranks)" \
  --world 2 --strategy zero1 4096
expect "7B in 32 units on 8 ranks, ZeRO-3, bf16" 0 "total                                14.67 GiB per rank" \
  --world 8 --params 7B --units 32 --param-dtype bf16 --strategy zero3
expect "units given as shapes and repeats" 0 "4196352 parameters in 3 units" \
  --world 2 --strategy zero2 "1024x2048,2048" "2*1024x1024"
expect "fits on a GPU" 0 "fits: " --world 8 --params 7B --units 32 --param-dtype bf16 --gpu-gib 80
expect "does not fit" 1 "DOES NOT FIT" --world 1 --params 7B --units 32 --strategy zero3 --gpu-gib 80
expect "hybrid groups that do not divide" 1 "hybrid shard groups of 2 ranks do not divide 3 ranks" \
  --world 3 --strategy hybrid --group 2 4096
expect "hybrid without its group size" 2 "--strategy hybrid needs --group" --world 8 --strategy hybrid 4096
expect "hybrid over groups of 4 of 8 ranks" 0 "per rank (sharded over 4 ranks)" \
  --world 8 --strategy hybrid --group 4 4096
expect "a size that is not one" 2 "'4096x': '' is not a number" --world 2 4096x
expect "no units" 2 "no units" --world 2
expect "an unknown strategy" 2 "--strategy zero4" --world 2 --strategy zero4 10
# Offload by hand, 1 rank, ZeRO-3, one 4096-element fp32 unit. GPU: 16 KiB each
# of reduced gradient slot, parameter shard, gathered parameters and gradients
# in full, and the 4 B scalar. Host: 16 KiB master, 32 KiB moments, 16 KiB
# gradients, 32 KiB of staging, 16 KiB of parameters on their way out.
expect "offload by hand: the GPU" 0 "total                                                64.0 KiB per rank" \
  --world 1 --strategy zero3 --offload optimizer 4096
expect "offload by hand: the host" 0 "total                                                112.0 KiB per rank" \
  --world 1 --strategy zero3 --offload optimizer 4096
# Stepping in backward, 3 units of 4096: gradients and parameters in 3 slots
# each (48 KiB each), no staging; 48 KiB master, 96 KiB moments.
expect "offload in backward by hand: the host" 0 "total                                                240.0 KiB per rank" \
  --world 1 --strategy zero3 --offload optimizer --update-in-backward 3*4096
expect "offload: the host does not fit" 1 "host: DOES NOT FIT" \
  --world 1 --strategy zero3 --offload optimizer --params 7B --units 100 --host-gib 64
expect "parameters offloaded need zero3" 1 "offloading the parameters needs zero3 or hybrid" \
  --world 1 --strategy zero2 --offload params 4096
expect "an unknown offload" 2 "--offload disk: none, optimizer, params or nvme" --world 1 --offload disk 10
# nvme: the states in a file (each array padded to 4 KiB), a window of them in host memory.
expect "offload nvme by hand: the file" 0 "fp32 master shards and AdamW moments                 48.0 KiB" \
  --world 1 --strategy zero3 --offload nvme 4096
expect "offload nvme by hand: the window" 0 "fp32 states, a window of 4 units                     192.0 KiB" \
  --world 1 --strategy zero3 --offload nvme --update-in-backward 6*4096
expect "offload nvme: the disk does not fit" 1 "disk: DOES NOT FIT" \
  --world 1 --strategy zero3 --offload nvme --params 7B --units 100 --disk-gib 64
expect "the largest model with nvme" 0 "offload nvme         553 units,     37.1B parameters (then the GPU memory is full)" \
  --world 1 --largest 8192x8192 --gpu-gib 70 --host-gib 115 --disk-gib 800 --param-dtype bf16 --update-in-backward
expect "the largest model, no disk given" 0 "offload nvme      (give --disk-gib)" \
  --world 1 --largest 8192x8192 --gpu-gib 70 --host-gib 115 --param-dtype bf16 --update-in-backward
expect "the largest model per offload setting" 0 "offload optimizer    152 units,     10.2B parameters (then the host memory is full)" \
  --world 1 --largest 8192x8192 --gpu-gib 70 --host-gib 115 --param-dtype bf16 --update-in-backward
expect "the largest model without offload" 0 "offload none          79 units,      5.3B parameters (then the GPU memory is full)" \
  --world 1 --largest 8192x8192 --gpu-gib 70 --host-gib 115 --param-dtype bf16 --update-in-backward
expect "--largest alone" 2 "--largest needs --gpu-gib and --host-gib" --world 1 --largest 4096
exit $fail
