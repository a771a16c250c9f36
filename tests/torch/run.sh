#!/usr/bin/env bash
# Runs a PyTorch test of the rtd backend with real torch:
#   tests/torch/run.sh PYTHON DTRUN BUILD_PYTHON_DIR MODE ARGS...
# MODE: dtrun N SCRIPT ARGS   under dtrun (which puts rt_dist on PYTHONPATH itself)
#       torchrun N SCRIPT ARGS  under torchrun (PYTHONPATH set here, as a user would)
#       mpirun N SCRIPT ARGS    under mpirun (the script's ranks from Open MPI's variables)
#       spawn SCRIPT ARGS       the script starts its own processes (PYTHONPATH set here)
#       one_gpu N SCRIPT ARGS   N ranks on one GPU: N dtruns of one worker each, told
#                             apart as NCCL hosts (NCCL_HOSTID), so that NCCL takes
#                             N ranks on one device (over its socket transport)
#       failure CASE EXPECT [env...]  tests/torch/failures.py (on $RTD_TORCH_DEVICE, default
#                             cpu): every rank must exit 3
#                             (an exception caught) and rank 0's message hold EXPECT;
#                             CASE exit*: the job must fail, a "found at exit" line holding EXPECT
# Exits 77 (skipped) when PYTHON has no torch (deploy/install_deps.sh installs it).
set -u
python=$1 dtrun=$2 pydir=$3 mode=$4; shift 4
here=$(cd "$(dirname "$0")" && pwd)
. "$here/need_torch.sh"
need_torch "$python"
# RTD_TORCH_GPUS=N: the test needs N GPUs; without them it is skipped, or,
# with RTD_REQUIRE_GPU=1 (on the GPU machine), it fails.
if [ -n "${RTD_TORCH_GPUS:-}" ]; then
  have=$("$python" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
  if [ "$have" -lt "$RTD_TORCH_GPUS" ]; then
    [ "${RTD_REQUIRE_GPU:-0}" = 1 ] && { echo "FAILED: $have GPU(s) visible to torch, $RTD_TORCH_GPUS needed (RTD_REQUIRE_GPU=1)"; exit 1; }
    echo "SKIPPED: $have GPU(s) visible to torch, $RTD_TORCH_GPUS needed"; exit 77
  fi
fi
export TORCH_CPP_LOG_LEVEL=ERROR PYTHONWARNINGS=ignore
case "$mode" in
  dtrun)
    n=$1 script=$2; shift 2
    exec timeout 300 "$dtrun" --nproc-per-node="$n" "$python" "$here/$script" "$@" ;;
  torchrun)
    n=$1 script=$2; shift 2
    PYTHONPATH="$pydir" exec timeout 300 "$python" -m torch.distributed.run --standalone \
      --nproc-per-node="$n" "$here/$script" "$@" ;;
  spawn)
    script=$1; shift
    PYTHONPATH="$pydir" exec timeout 300 "$python" "$here/$script" "$@" ;;
  mpirun)
    n=$1 script=$2; shift 2
    command -v mpirun >/dev/null || { echo "SKIPPED: mpirun is not installed"; exit 77; }
    port=$(( 20000 + RANDOM % 20000 ))
    exec timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" \
      -x PYTHONPATH="$pydir" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port \
      -x TORCH_CPP_LOG_LEVEL -x PYTHONWARNINGS \
      "$python" "$here/mpi_launch.py" "$here/$script" "$@" ;;
  one_gpu)
    n=$1 script=$2; shift 2
    . "$here/one_gpu_dtruns.sh"
    out=$(mktemp -d) rc=0
    trap 'rm -rf "$out"' EXIT
    one_gpu_dtruns "$dtrun" "$n" $(( 20000 + RANDOM % 20000 )) "$out/dtrun" -- \
      "$python" "$here/$script" "$@" || rc=1
    for i in $(seq 0 $((n - 1))); do sed "s/^/[dtrun $i] /" "$out/dtrun.$i"; done
    exit $rc ;;
  failure)
    case_=$1 expect=$2; shift 2
    log=$(mktemp); trap 'rm -f "$log"' EXIT
    env "$@" timeout 120 "$dtrun" --nproc-per-node=2 "$python" "$here/failures.py" "$case_" \
      "${RTD_TORCH_DEVICE:-cpu}" >"$log" 2>&1
    rc=$?
    cat "$log"
    [ $rc -eq 124 ] && { echo "FAILED: the job hung"; exit 1; }
    if [[ $case_ == exit* ]]; then  # nothing caught: the process itself must fail, saying why
      [ $rc -ne 0 ] || { echo "FAILED: the job succeeded"; exit 1; }
      grep "found at exit" "$log" | grep -qF -- "$expect" || {
        echo "FAILED: no exit message that says '$expect'"; exit 1; }
      echo "ok: exit fails the process with a message that says '$expect'"; exit 0
    fi
    caught=$(grep -c "caught" "$log")
    grep "rank 0 caught" "$log" | grep -qF -- "$expect" || {
      echo "FAILED: rank 0's exception does not say '$expect'"; exit 1; }
    if [ "$case_" = mismatch ] && [ "$caught" -ne 2 ]; then
      echo "FAILED: $caught rank(s) caught an exception, not 2"; exit 1
    fi
    echo "ok: $case_ fails with an exception that says '$expect'" ;;
  *) echo "usage: run.sh PYTHON DTRUN PYDIR dtrun|torchrun|spawn|mpirun|one_gpu|failure ..."; exit 2 ;;
esac
