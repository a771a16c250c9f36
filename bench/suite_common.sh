# Sourced by the GPU suites (ddp_suite.sh, fsdp_suite.sh) after they set
# bundle, top and anchor: the output folder, the GPU count, dtrun's command
# line, and the two helpers every suite uses.
bin=$bundle/bin
out=$top/suite
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
ngpu=$(nvidia-smi -L | wc -l)
nvidia-smi -L
dt=("$bin/dtrun" --env NCCL_NVLS_ENABLE=0 --env RTD_LOG=warn)
step() {  # name, limit, command...: its log in $out/name.log, its times in steps.txt
  local name=$1 limit=$2; shift 2
  local start=$(date +%s.%N)
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local end=$(date +%s.%N)
  echo "$name $start $end $rc" >>"$out/steps.txt"
  echo "== $name: exit $rc in $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.0f", b-a}') s"
}
table() { grep -vE 'dtrun node|^\[rank [1-9]|NCCL INFO' "$out/$1.log" | tail -"$2"; }
