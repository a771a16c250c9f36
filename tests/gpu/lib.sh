# Shared by the GPU test scripts: no GPU skips (77), or fails where
# RTD_REQUIRE_GPU=1 says a GPU must be there (the GPU machine's runs).
no_gpu() {
  if [ "${RTD_REQUIRE_GPU:-0}" = 1 ]; then echo "FAILED: RTD_REQUIRE_GPU=1 but $*"; exit 1; fi
  echo "skipped: $*"; exit 77
}
