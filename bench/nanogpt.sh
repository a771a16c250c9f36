#!/usr/bin/env bash
# nanoGPT's train.py, unchanged, under dtrun on nccl and on rtd (its own
# --backend flag), on synthetic tokens: the iteration times and losses of both.
#   bench/nanogpt.sh NANOGPT_DIR BUNDLE OUT [PYTHON] [NPROC]
# NANOGPT_DIR: a checkout of github.com/karpathy/nanoGPT (its DDP path needs
# GPUs); BUNDLE: deploy/bundle.sh's output (dtrun and lib/rt_dist/python).
# GPT-2 small (124M), block 1024, batch 12, 2 micro-steps per iteration.
set -u
src=$(cd "$1" && pwd) bundle=$(cd "$2" && pwd) out=$3 py=${4:-python3} nproc=${5:-2}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src"/. "$work/"
# Tokens drawn at random from GPT-2's vocabulary: nanoGPT reads uint16 arrays.
mkdir -p "$work/data/rtd_synthetic"
"$py" - "$work/data/rtd_synthetic" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
for name, n in (("train.bin", 4_000_000), ("val.bin", 200_000)):
    rng.integers(0, 50257, n, dtype=np.uint16).tofile(f"{sys.argv[1]}/{name}")
PY
for backend in nccl rtd; do
  (cd "$work" && timeout 300 "$bundle/bin/dtrun" --nproc-per-node="$nproc" --env RTD_LOG=warn \
    "$py" train.py --dataset=rtd_synthetic --backend=$backend --compile=False \
    --max_iters=40 --eval_interval=100000 --eval_iters=1 --log_interval=10 \
    --always_save_checkpoint=False --batch_size=12 --gradient_accumulation_steps=$((2 * nproc)) \
    --out_dir="$work/out_$backend") >"$out/nanogpt_$backend.log" 2>&1
  echo "== nanogpt $backend: exit $?"
  grep -E "iter [0-9]+: loss" "$out/nanogpt_$backend.log" | sed 's/^\[rank 0\]: //' | tail -4
done
