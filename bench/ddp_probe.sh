#!/usr/bin/env bash
# Where the DDP step's exposed time goes, on the GPU machine: the step's
# phases against NCCL's thread-block count and the SMs backward's products
# are planned for, GPU clocks, power and clock-limit reasons sampled every
# 50 ms through a long run of one GPU then DDP, and PyTorch's anchor.
#   bench/ddp_probe.sh BUNDLE_DIR OUT_DIR ANCHOR_PY
# Logs, the clock trace and the JSON files end up in OUT_DIR/probe.tgz.
set -u
bundle=$1 out=$2 anchor=$3
bin=$bundle/bin
logs=$out/probe
export NCCL_NVLS_ENABLE=0
mkdir -p "$logs"
ngpu=$(nvidia-smi -L | wc -l)
dt=("$bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn --nproc-per-node=$ngpu)
step() {  # name, limit, command...
  local name=$1 limit=$2; shift 2
  echo "$name start $(date +%H:%M:%S.%N)" >>"$logs/steps.txt"
  timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "$name end $(date +%H:%M:%S.%N) exit $rc" >>"$logs/steps.txt"
  echo "== $name: exit $rc"
  grep -vE 'dtrun node|^\[rank [1-9]|rendezvous' "$logs/$name.log" | tail -"${TAIL:-12}"
}

fields=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$fields --format=csv -c 1 >/dev/null 2>&1 ||
  fields=${fields/clocks_event_reasons/clocks_throttle_reasons}
nvidia-smi --query-gpu=$fields --format=csv,nounits -lms 50 >"$logs/smi.csv" 2>&1 &
smi=$!

# One GPU for 100 steps, then DDP+opt for 100: the clock trace's two halves.
TAIL=4 step trace 120 "${dt[@]}" "$bin/ddp_step" --reduce fp32 --overlap-optimizer 1 \
  --warmup 5 --steps 100 --json "$logs/trace.json"
kill $smi 2>/dev/null
for ctas in 8 16; do
  TAIL=5 step max_ctas_$ctas 90 "${dt[@]}" --env RTD_NCCL_MAX_CTAS=$ctas "$bin/ddp_step" \
    --reduce fp32 --overlap-optimizer serial,1 --json "$logs/max_ctas_$ctas.json"
done
TAIL=5 step min_ctas_32 90 "${dt[@]}" --env RTD_NCCL_MIN_CTAS=32 "$bin/ddp_step" \
  --reduce fp32 --overlap-optimizer serial,1 --json "$logs/min_ctas_32.json"
TAIL=7 step backward_sms 120 "${dt[@]}" "$bin/ddp_step" --reduce fp32 --overlap-optimizer 1 \
  --backward-sms 0,100,108,116,124 --json "$logs/backward_sms.json"
ANCHOR_JSON=$logs/anchor.json PYTHONUNBUFFERED=1 TAIL=4 step torch_anchor 200 \
  torchrun --nproc-per-node=$ngpu "$anchor"
tar czf "$out/probe.tgz" -C "$out" probe && rm -rf "$logs"
