#!/usr/bin/env bash
# Exploratory, 2 ranks on one GPU under a private MPS daemon (NCCL between the ranks over sockets):
# the zoo's gpt2-125m, DDP and FSDP2, nccl against the C++ rtd with copy engines (pushed staged
# sites), and in a second job against the Python backend (its DDP and FSDP2 hooks).
out=$1; b=dist/gpu; mkdir -p $out/logs
PATH=/opt/gcc/bin:$PATH CXX=g++ python/build_ext.sh python3 $b/lib/rt_dist/python > $out/logs/ext.log 2>&1 || { tail $out/logs/ext.log; exit 1; }
RTD_REQUIRE_GPU=1 timeout 200 tests/torch/recovery.sh python3 $b/bin/dtrun cuda > $out/logs/recovery_cuda.log 2>&1; echo "== recovery cuda: exit $?"
grep -E "FAILED|was the spare|from the kill|equal the unbroken" $out/logs/recovery_cuda.log | head -12
export CUDA_MPS_PIPE_DIRECTORY=/tmp/rtd-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/rtd-mps/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && echo "MPS daemon started (private pipe directory)"
. tests/torch/one_gpu_dtruns.sh
z=(env MODELS="gpt2-350m" MODES="ddp fsdp2" ROUNDS=3 STEPS=5 WARM=9 PYTHONUNBUFFERED=1)
"${z[@]}" BACKENDS="rtd:RTD_TORCH_COPY_ENGINES=1" BENCH_JSON=$out/zoo_cpp.json timeout 120 bash -c ". tests/torch/one_gpu_dtruns.sh; one_gpu_dtruns $b/bin/dtrun 2 29641 $out/logs/zoo_cpp --env RTD_LOG=warn -- python3 bench/zoo/run.py"
echo "== zoo C++: exit $?"; grep -hE "zoo|ms" $out/logs/zoo_cpp.0 | head
"${z[@]}" RTD_TORCH_IMPL=python BACKENDS="rtd" BENCH_JSON=$out/zoo_python.json timeout 120 bash -c ". tests/torch/one_gpu_dtruns.sh; one_gpu_dtruns $b/bin/dtrun 2 29651 $out/logs/zoo_python --env RTD_LOG=warn -- python3 bench/zoo/run.py"
echo "== zoo Python backend: exit $?"; grep -hE "zoo|ms" $out/logs/zoo_python.0 | head
echo quit | nvidia-cuda-mps-control; sleep 1; echo "MPS daemon stopped"
cd $out && tar czf logs.tgz logs && rm -rf logs
