#!/usr/bin/env bash
# The GPU machine's run: GPU tests on 1 and 2 GPUs, then the collective
# benchmark through raw NCCL and through our communicator, then PyTorch's
# anchor, all in one run so that the figures compare.
#   bench/gpu_suite.sh BUNDLE_DIR OUT_DIR [ANCHOR_PY]
# BUNDLE_DIR is what deploy/bundle.sh --with-tests made. NCCL_NVLS_ENABLE=0
# is kept for every worker.
# Logs and JSON end up in OUT_DIR/collectives.tgz (one file to fetch).
set -u
bundle=$1 top=$2 anchor=${3:-}
bin=$bundle/bin
out=$top/collectives
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
trap 'tar czf "$top/collectives.tgz" -C "$top" collectives && rm -rf "$out"' EXIT
nvidia-smi -L
nvidia-smi topo -m 2>/dev/null | head -5
ngpu=$(nvidia-smi -L | wc -l)
missing=$(ldd "$bin/dtrun" "$bin/collective_bench" | grep 'not found')
[ -n "$missing" ] && { echo "bundle: missing libraries: $missing"; exit 1; }
ldd "$bin/collective_bench" | grep -E 'nccl|cudart' || true

run() {  # name, limit, command...
  local name=$1 limit=$2; shift 2
  local start=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $(( $(date +%s) - start )) s"
  return $rc
}
dt=("$bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn)

for n in 1 $ngpu; do
  run gpu_tests_np$n 240 "${dt[@]}" --nproc-per-node=$n "$bin/gpu_collectives_test"
  grep -E '^\[rank 0\]: \[  (PASSED|FAILED|SKIPPED) ' "$out/gpu_tests_np$n.log" | head -20
done
for mode in ${BENCH_MODES:-raw ours}; do
  run bench_$mode 300 "${dt[@]}" --nproc-per-node=$ngpu "$bin/collective_bench" --mode $mode \
    --max-bytes ${BENCH_MAX:-1G} --json "$out/bench_$mode.json" --label "$(hostname)"
done
if [ -n "$anchor" ]; then
  ANCHOR_JSON=$out/anchor.json PYTHONUNBUFFERED=1 run torch_anchor 300 \
    torchrun --nproc-per-node=$ngpu "$anchor"
  grep -E 'allreduce|step|FSDP' "$out/torch_anchor.log" | head -40
fi
