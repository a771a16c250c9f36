#!/usr/bin/env bash
# The offload measurements on one GPU, in one run: the three floors of an
# offloaded step (the GPU alone: the same model kept on the GPU; the host
# AdamW alone: cpu_adamw_bench; the link alone: bench/pcie_copy.py), then
# rtd::FSDP with the optimizer offloaded (updating in backward, and at the
# step) against PyTorch FSDP2 with CPUOffloadPolicy on the same model, then
# the large models. Env: PY (python with torch), H, B, MID (layers of the
# model that also fits on the GPU), BIG (layers of the large ones), STEPS,
# PARTS ("mid big" by default: the floors and the model that fits, then the
# large one), DELAYED=1 (also the delayed parameter update), NO_TORCH=1 (the
# large ones without FSDP2), FSDP2 (its variants on the model that fits,
# REDUCE:FLUSH_DENORMAL pairs), THREADS (other counts of host AdamW threads
# to run the model that fits with). PARTS may add "kernels" (the host AdamW's AVX2
# and AVX-512 kernels over 1..16 threads) and "nvme" (the disk's floor by
# bench/disk_copy.py, then NV layers (default 8) offloaded to a file in
# NVME_DIR (default /tmp), with each count of I/O threads in NVME_IO, against
# the same offloaded to host memory).
#   bench/offload_suite.sh BUNDLE OUT_DIR
set -u
bundle=$1 out=$2
bin=$bundle/bin
py=${PY:-python3}
H=${H:-8192} B=${B:-8192} MID=${MID:-30} BIG=${BIG:-104} STEPS=${STEPS:-5}
parts=" ${PARTS:-mid big} "
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export RTD_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
free -g | head -2
run() {  # name, limit, command...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s"
  grep -E "^RESULT|step $STEPS |offload|memory plan|MiB in host|^ *(kernel|avx|[0-9]+ +[0-9])" \
    "$out/$name.log" | tail -12
}
dt=("$bin/dtrun" --nproc-per-node=1 --env RTD_LOG=warn)
mlp=("$bin/mlp_gpu" --hidden "$H" --batch "$B" --steps "$STEPS" --log-every 1 --grads bf16
     --shard zero3)
if [[ $parts == *" mid "* ]]; then
run pcie 120 "$py" "$here/pcie_copy.py"
run cpu_adamw 300 env LD_LIBRARY_PATH="$bundle/lib" "$bin/cpu_adamw_bench" --elements 512M --threads 1,8,16 --reps 3 \
  --json "$out/cpu_adamw.json"
run gpu_alone_L$MID 300 "${dt[@]}" "${mlp[@]}" --layers "$MID"
run ours_optimizer_L$MID 300 "${dt[@]}" "${mlp[@]}" --layers "$MID" --offload optimizer
for t in ${THREADS:-}; do  # the host AdamW's threads, other than one per core
  run ours_optimizer_threads${t}_L$MID 300 "${dt[@]}" "${mlp[@]}" --layers "$MID" --offload optimizer \
    --offload-threads "$t"
done
[ -n "${DELAYED:-}" ] && run ours_optimizer_delayed_L$MID 300 "${dt[@]}" "${mlp[@]}" --layers "$MID" \
  --offload optimizer --delayed-update 1
run ours_optimizer_at_step_L$MID 300 "${dt[@]}" "${mlp[@]}" --layers "$MID" --offload optimizer \
  --update-in-backward 0
run ours_params_L$MID 300 "${dt[@]}" "${mlp[@]}" --layers "$MID" --offload params
for variant in ${FSDP2:-bf16:0 bf16:1 fp32:0 fp32:1}; do  # reduce dtype : flush denormals
  reduce=${variant%:*} flush=${variant#*:}
  run fsdp2_offload_${reduce}_flush${flush}_L$MID 400 env H="$H" B="$B" L="$MID" STEPS="$STEPS" \
    WARM=1 REDUCE=$reduce FLUSH_DENORMAL=$flush "$py" -m torch.distributed.run \
    --nproc-per-node=1 "$here/torch_offload.py"
done
fi
if [[ $parts == *" kernels "* ]]; then
run cpu_adamw_kernels 300 env LD_LIBRARY_PATH="$bundle/lib" "$bin/cpu_adamw_bench" --elements 512M \
  --threads 1,2,4,8,16 --reps 3 --json "$out/cpu_adamw_kernels.json"
fi
if [[ $parts == *" nvme "* ]]; then
NV=${NV:-8} dir=${NVME_DIR:-/tmp}
df -h "$dir" | tail -1
run disk 300 "$py" "$here/disk_copy.py" "$dir" 4 8
run ours_optimizer_L$NV 300 "${dt[@]}" "${mlp[@]}" --layers "$NV" --offload optimizer
for io in ${NVME_IO:-8}; do  # the file's I/O threads
  run ours_nvme_io${io}_L$NV 400 "${dt[@]}" "${mlp[@]}" --layers "$NV" --offload nvme \
    --offload-dir "$dir" --offload-io-threads "$io"
done
[ -n "${DELAYED:-}" ] && run ours_nvme_delayed_L$NV 400 "${dt[@]}" "${mlp[@]}" --layers "$NV" \
  --offload nvme --offload-dir "$dir" --delayed-update 1
fi
if [[ $parts == *" big "* ]]; then
for L in $BIG; do  # BIG may list several sizes: the largest that trains
  run ours_optimizer_L$L 300 "${dt[@]}" "${mlp[@]}" --layers "$L" --offload optimizer
  [ -n "${DELAYED:-}" ] && run ours_optimizer_delayed_L$L 300 "${dt[@]}" "${mlp[@]}" --layers "$L" \
    --offload optimizer --delayed-update 1
  [ -n "${NO_TORCH:-}" ] && continue
  run fsdp2_offload_bf16_L$L 300 env H="$H" B="$B" L="$L" STEPS=2 WARM=1 REDUCE=bf16 FLUSH_DENORMAL=1 \
    "$py" -m torch.distributed.run --nproc-per-node=1 "$here/torch_offload.py"
  free -g | sed -n 2p
done
fi
exit 0
