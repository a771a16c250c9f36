#!/usr/bin/env bash
# PyTorch's own FSDP2 example (pytorch/examples, distributed/FSDP2/example.py),
# unchanged, under dtrun on nccl and then on rtd (RTD_TORCH_DEFAULT=1: the
# example asks torch for the default backend of its device), each in a fresh
# directory; then the two runs' saved model state dicts side by side (the same
# seed and inputs: equal to reduction order). Times each run; the example
# itself needs 2 GPUs or more.
#   bench/fsdp2_example.sh FSDP2_DIR BUNDLE OUT_DIR [PYTHON] [NPROC]
# FSDP2_DIR: a copy of distributed/FSDP2 (carried to the GPU machine).
set -u
src=$(cd "$1" && pwd) bundle=$2 out=$3 py=${4:-python3} nproc=${5:-2}
mkdir -p "$out"
for backend in nccl rtd; do
  dir=$(mktemp -d)
  cp "$src"/*.py "$dir/"
  default=0
  [ "$backend" = rtd ] && default=1
  start=$SECONDS
  (cd "$dir" && RTD_TORCH_DEFAULT=$default timeout 600 "$bundle/bin/dtrun" \
    --nproc-per-node="$nproc" --env RTD_LOG=warn "$py" example.py --mixed-precision) \
    >"$out/$backend.log" 2>&1
  rc=$?
  echo "== $backend: exit $rc in $((SECONDS - start)) s"
  tail -3 "$out/$backend.log"
  # checkpoints/<dtensor_api|dcp_api>/<time>/model_state_dict.pt
  saved=$(find "$dir/checkpoints" -name model_state_dict.pt 2>/dev/null | sort | tail -1)
  [ -n "$saved" ] && cp "$saved" "$out/$backend.model.pt"
  rm -rf "$dir"
done
"$py" - "$out" <<'PY'
import sys, torch
out = sys.argv[1]
try:
    a = torch.load(f"{out}/nccl.model.pt", map_location="cpu")
    b = torch.load(f"{out}/rtd.model.pt", map_location="cpu")
except FileNotFoundError as e:
    sys.exit(f"no saved model to compare: {e}")
worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
print(f"RESULT fsdp2_example tensors={len(a)} same_keys={set(a) == set(b)} max_abs_diff={worst:.3g}")
PY
