#!/usr/bin/env bash
# The Python linter over the tree (ruff.toml says what it checks):
#   tests/lint_python.sh RUFF SOURCE_DIR
# A missing linter fails: deploy/install_torch.sh installs it.
set -u
ruff=$1 src=$2
[ -x "$ruff" ] || { echo "FAILED: no ruff at $ruff: run deploy/install_torch.sh"; exit 1; }
cd "$src" && exec "$ruff" check --no-cache .
