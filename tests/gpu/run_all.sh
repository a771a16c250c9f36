#!/usr/bin/env bash
# The GPU tests as the GPU machine runs them, from a bundle (deploy/bundle.sh
# --with-tests), with RTD_REQUIRE_GPU=1 so that a missing or broken GPU fails
# instead of skipping: gpu_collectives_test on 1 GPU and on all, the
# copy-engine test on one GPU shared by 2 ranks, the resume, recovery,
# missing-peer and trace scripts, and `dtrun doctor` (with --bench) on the
# node's GPUs.
#   tests/gpu/run_all.sh BUNDLE_DIR [collectives] [ce_shared] [trace] [resume] [recovery]
#                        [loss] [peer_missing] [doctor]
# (no step named: all). Prints one "== name: exit N" line a step (77: the
# step skipped itself, saying why); exits 1 when any step failed.
set -u
bin=$1/bin
shift
steps=" ${*:-collectives ce_shared trace resume recovery loss peer_missing doctor} "
want() { [[ $steps == *" $1 "* ]]; }
here=$(cd "$(dirname "$0")" && pwd)
export RTD_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
fail=0
step() {  # name, limit, command...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" >"/tmp/run_all_$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s"
  # 77: the step skipped itself for a reason it printed (too few GPUs), not a failure.
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || { fail=1; tail -25 "/tmp/run_all_$name.log"; }
  grep -E '\[  (PASSED|FAILED|SKIPPED) |ok:|FAIL|skipped' "/tmp/run_all_$name.log" | sort | uniq -c | head -8
}
nvidia-smi -L
ngpu=$(nvidia-smi -L | wc -l)
dt=("$bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn --env RTD_REQUIRE_GPU=1)
if want collectives; then
  step collectives_np1 240 "${dt[@]}" --nproc-per-node=1 "$bin/gpu_collectives_test"
  [ "$ngpu" -lt 2 ] ||
    step collectives_np$ngpu 240 "${dt[@]}" --nproc-per-node="$ngpu" "$bin/gpu_collectives_test"
  # The sizes the copy-engine path stages, staged (RTD_CE_STAGED, as the rtd backend does).
  [ "$ngpu" -lt 2 ] || step collectives_staged_np$ngpu 240 "${dt[@]}" --env RTD_CE_STAGED=1 \
    --nproc-per-node="$ngpu" "$bin/gpu_collectives_test" --gtest_filter='Large/*'
  # Again with every call on the communicator's stream (by default calls up to
  # 1 MiB run on the caller's: RTD_NCCL_INLINE_BYTES).
  step collectives_commstream_np$ngpu 240 "${dt[@]}" --env RTD_NCCL_INLINE_BYTES=0 \
    --nproc-per-node="$ngpu" "$bin/gpu_collectives_test"
fi
# With a trace directory, as CTest's gpu.ce_shared.np2 runs it: its second case checks the spans.
if want ce_shared; then
  trace_dir=$(mktemp -d)
  step ce_shared_np2 120 "${dt[@]}" --nproc-per-node=2 --env RTD_TRACE_DIR="$trace_dir" \
    "$bin/gpu_ce_shared_test"
  rm -rf "$trace_dir"
fi
want trace && step trace_copies 240 "$here/trace_copies.sh" "$bin/dtrun" "$bin/mlp_gpu"
want resume && step checkpoint_resume 300 "$here/checkpoint_resume.sh" "$bin/dtrun" "$bin/mlp_gpu" "$ngpu"
want recovery && step recovery 300 "$here/recovery.sh" "$bin/dtrun" "$bin/mlp_gpu"
want loss && step loss_falls 300 "$here/loss_falls.sh" "$bin/dtrun" "$bin/mlp_gpu"
want peer_missing && step peer_missing 200 "$here/peer_missing.sh" "$bin/dtrun" "$bin/collective_bench"
if want doctor; then
  step doctor 60 "$bin/dtrun" doctor --nproc-per-node="$ngpu"
  grep -E "GPU link|GPUs " /tmp/run_all_doctor.log
  step doctor_bench 120 "$bin/dtrun" doctor --bench --nproc-per-node="$ngpu"
  grep -E "GB/s|GPU link" /tmp/run_all_doctor_bench.log
fi
exit $fail
