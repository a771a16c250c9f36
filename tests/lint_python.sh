#!/usr/bin/env bash
# The Python linter over the tree (ruff.toml says what it checks):
#   tests/lint_python.sh RUFF SOURCE_DIR
# A missing linter fails: deploy/install_torch.sh installs it.
set -u
ruff=$1 src=$2
if [ ! -x "$ruff" ]; then
  [ "${RTD_SKIP_TORCH_TESTS:-0}" = 1 ] && { echo "SKIPPED: no ruff at $ruff (RTD_SKIP_TORCH_TESTS=1)"; exit 77; }
  echo "FAILED: no ruff at $ruff: run deploy/install_torch.sh"; exit 1
fi
cd "$src" && exec "$ruff" check --no-cache .
