#!/usr/bin/env bash
# PyTorch FSDP2 with CPUOffloadPolicy on one GPU, its optimizer torch's
# AdamW (fused; as torch.optim.AdamW() makes it for host tensors, the
# for-loop: torch_default; and its best: fused, bf16 reduction, denormals
# flushed) or
# rt_dist.torch.HostAdamW (after backward, and in it), on the same
# transformers, alternating, in one run:
#   bench/torch_offload_ab.sh BUNDLE OUT_DIR
# Env: PY (python with torch), MODELS (bench/zoo shapes, default
# "llama-1b llama-3b"), VARIANTS (default "torch rtd rtd_backward torch_best"),
# ROUNDS (default 1), STEPS and WARM (bench/torch_offload.py's).
set -u
bundle=$1 out=$2
py=${PY:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 STEPS=${STEPS:-3} WARM=${WARM:-1}
nvidia-smi -L
lscpu | grep -E "^Model name|^CPU\(s\)"
for round in $(seq "${ROUNDS:-1}"); do
  for model in ${MODELS:-llama-1b llama-3b}; do
    for variant in ${VARIANTS:-torch rtd rtd_backward torch_best}; do
      case $variant in
        torch) env=(OPTIM=torch FUSED=1) ;;
        torch_default) env=(OPTIM=torch FUSED=0) ;;
        torch_best) env=(OPTIM=torch FUSED=1 REDUCE=bf16 FLUSH_DENORMAL=1) ;;
        rtd) env=(OPTIM=rtd) ;;
        rtd_backward) env=(OPTIM=rtd_backward) ;;
      esac
      log="$out/$model.$variant.$round.log"
      env MODEL="$model" "${env[@]}" timeout -k 10 "${LIMIT:-240}" "$bundle/bin/dtrun" \
        --nproc-per-node=1 --env RTD_LOG=warn "$py" "$here/torch_offload.py" >"$log" 2>&1
      echo "== $model $variant round $round: exit $?"
      grep "^RESULT\|Error\|error" "$log" | tail -3
    done
  done
done
