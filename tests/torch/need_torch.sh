# Sourced by the torch tests' runners: need_torch PYTHON returns when PYTHON
# has torch. Without it the test fails (deploy/install_torch.sh installs
# torch; the README's test command runs it), unless RTD_SKIP_TORCH_TESTS=1
# asks to skip these tests (a machine without the Python package index).
need_torch() {
  "$1" -c "import torch" 2>/dev/null && return 0
  if [ "${RTD_SKIP_TORCH_TESTS:-0}" = 1 ]; then
    echo "SKIPPED: $1 cannot import torch, and RTD_SKIP_TORCH_TESTS=1 asks to skip"
    exit 77
  fi
  echo "FAILED: $1 cannot import torch: run deploy/install_torch.sh (or set RTD_SKIP_TORCH_TESTS=1 to skip the torch tests)"
  exit 1
}
