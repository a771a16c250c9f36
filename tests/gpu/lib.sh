# Shared by the GPU test scripts: no GPU skips (77), or fails where
# RTD_REQUIRE_GPU=1 says a GPU must be there (the GPU machine's runs).
no_gpu() {
  if [ "${RTD_REQUIRE_GPU:-0}" = 1 ]; then echo "FAILED: RTD_REQUIRE_GPU=1 but $*"; exit 1; fi
  echo "skipped: $*"; exit 77
}
# Skips (or fails, as no_gpu says) unless nvidia-smi lists a GPU; sets ngpu
# to how many it lists.
require_gpu() {
  command -v nvidia-smi >/dev/null || no_gpu "nvidia-smi is not installed (no GPU driver)"
  nvidia-smi -L >/dev/null 2>&1 || no_gpu "nvidia-smi -L finds no GPU: $(nvidia-smi -L 2>&1 | head -1)"
  ngpu=$(nvidia-smi -L | wc -l)
}
# "ok: WHAT" when PATTERN is in $work/LOG, else "FAIL: ..." and fail=1.
check() {  # what, pattern, log
  if grep -q -- "$2" "$work/$3"; then echo "ok: $1"; else echo "FAIL: $1 (no '$2')"; fail=1; fi
}
