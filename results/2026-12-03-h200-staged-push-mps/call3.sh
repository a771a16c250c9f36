#!/usr/bin/env bash
# ce_shared on 3 ranks (the fixed back-to-back case); staged_ce_bench under MPS (a private daemon).
out=$1; b=dist/gpu; mkdir -p $out/logs
export RTD_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
dt=($b/bin/dtrun --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn --env RTD_REQUIRE_GPU=1)
for np in 3 2; do
  timeout 180 "${dt[@]}" --nproc-per-node=$np $b/bin/gpu_ce_shared_test > $out/logs/ce_shared_np$np.log 2>&1
  echo "== ce_shared_np$np: exit $?"; grep -E "OK \]|FAILED \]" $out/logs/ce_shared_np$np.log | grep "rank 0" | head
done
which nvidia-cuda-mps-control || { echo "no MPS"; exit 0; }
export CUDA_MPS_PIPE_DIRECTORY=/tmp/rtd-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/rtd-mps/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && echo "MPS daemon started (private pipe directory)"
sleep 1
for np in 2 3; do
  timeout 200 "${dt[@]}" --nproc-per-node=$np $b/bin/staged_ce_bench --mb 1,4,25,100,400 --rounds 7 --calls 20 --json $out/staged_ce_mps_np$np.json > $out/logs/bench_mps_np$np.log 2>&1
  echo "== bench_mps_np$np: exit $?"; grep -v "^\[\|dtrun" $out/logs/bench_mps_np$np.log | head -20
done
timeout 180 "${dt[@]}" --nproc-per-node=2 $b/bin/gpu_ce_shared_test > $out/logs/ce_shared_mps_np2.log 2>&1
echo "== ce_shared_mps_np2: exit $?"
echo quit | nvidia-cuda-mps-control; sleep 1; echo "MPS daemon stopped"; cat $CUDA_MPS_LOG_DIRECTORY/control.log 2>/dev/null | tail -3
cd $out && tar czf logs.tgz logs && rm -rf logs
