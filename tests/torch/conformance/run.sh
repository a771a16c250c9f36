#!/usr/bin/env bash
# PyTorch's distributed test suite on a reference backend and on rtd, then
# each test's result side by side:
#   [REFERENCE=gloo|nccl] [SHARDS=N] [SHARD_LIMIT=S] \
#     tests/torch/conformance/run.sh PYTHON PYTHONPATH OUT [WORLD_SIZE] [TESTS...]
# REFERENCE: gloo (CPU, the default) or nccl (GPUs: the suite's GPU cases,
# rtd taking every group it asks of nccl). SHARDS: the tests split into N
# runs at once, each in its own folder and port (for a machine with the cores
# and GPUs to spare; each run is limited to SHARD_LIMIT seconds, default 3600).
# REFERENCE_LOG: the reference's log of an earlier run, compared with instead
# of running the reference again.
# OUT/<backend>.log: unittest's verbose output; OUT/compare.txt: one line per
# test whose result differs between the two, and the counts. Exits 1 when a
# test that passes on the reference fails on rtd. TESTS: -k patterns.
set -u
py=$1 pypath=$2 out=$3 world=${4:-2}; shift 3; [ $# -gt 0 ] && shift
ref=${REFERENCE:-gloo} shards=${SHARDS:-1} limit=${SHARD_LIMIT:-3600}
case $ref in gloo|nccl) ;; *) echo "REFERENCE must be gloo or nccl, not '$ref'" >&2; exit 2 ;; esac
case $shards in ''|*[!0-9]*|0) echo "SHARDS must be a positive number, not '$shards'" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../need_torch.sh"
need_torch "$py"
if [ "$ref" = nccl ]; then  # GPUs: one a process, or skipped (failed with RTD_REQUIRE_GPU=1)
  have=$("$py" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
  if [ "$have" -lt "$world" ]; then
    [ "${RTD_REQUIRE_GPU:-0}" = 1 ] && { echo "FAILED: $have GPU(s), $world needed (RTD_REQUIRE_GPU=1)"; exit 1; }
    echo "SKIPPED: $have GPU(s) visible to torch, $world needed"; exit 77
  fi
fi
# The suite's helpers import expecttest (a test dependency of torch's).
PYTHONPATH=$pypath "$py" -c "import expecttest" 2>/dev/null ||
  { echo "FAILED: $py cannot import expecttest (pip install expecttest, or put it on PYTHONPATH)"; exit 1; }
mkdir -p "$out"
backends="$ref rtd"
if [ -n "${REFERENCE_LOG:-}" ]; then
  [ -f "$REFERENCE_LOG" ] || { echo "REFERENCE_LOG: no file $REFERENCE_LOG" >&2; exit 2; }
  cp "$REFERENCE_LOG" "$out/$ref.log.given"
  backends=rtd
fi
suite() {  # RTD_SUITE_BACKEND (empty: the reference itself), then unittest's arguments
  BACKEND=$ref RTD_SUITE_BACKEND=$1 WORLD_SIZE=$world PYTHONPATH=$pypath \
    PYTHONWARNINGS=ignore TORCH_CPP_LOG_LEVEL=ERROR \
    timeout -k 10 "$limit" "$py" "$here/dist_suite.py" "${@:2}"
}
if [ "$shards" -eq 1 ]; then
  filters=()
  for t in "$@"; do filters+=(-k "$t"); done
  for backend in $backends; do
    target=""; [ "$backend" = rtd ] && target=rtd
    suite "$target" -v "${filters[@]}" >"$out/$backend.log" 2>&1
  done
else
  # The suite's test names, those matching a pattern (as -k matches them:
  # a substring of the name), dealt round-robin into the shards.
  mapfile -t names < <(suite "" --discover-tests 2>/dev/null | grep '^TestDistBackendWithSpawn\.test_')
  if [ $# -gt 0 ]; then
    kept=()
    for n in "${names[@]}"; do
      for t in "$@"; do [[ $n == *"$t"* ]] && { kept+=("$n"); break; }; done
    done
    names=("${kept[@]}")
  fi
  [ "${#names[@]}" -gt 0 ] || { echo "no test of the suite matched: $*" >&2; exit 1; }
  echo "${#names[@]} tests in $shards shards"
  for backend in $backends; do
    target=""; [ "$backend" = rtd ] && target=rtd
    rm -f "$out/$backend".*.log  # an earlier run's shards
    for ((s = 0; s < shards; s++)); do
      part=()
      for ((i = s; i < ${#names[@]}; i += shards)); do part+=("${names[i]}"); done
      [ "${#part[@]}" -gt 0 ] && suite "$target" -v "${part[@]}" >"$out/$backend.$s.log" 2>&1 &
    done
    wait
    cat "$out/$backend".*.log >"$out/$backend.log"
  done
fi
[ -z "${REFERENCE_LOG:-}" ] || mv "$out/$ref.log.given" "$out/$ref.log"
"$py" "$here/compare.py" "$out/$ref.log" "$out/rtd.log" | tee "$out/compare.txt"
