#!/usr/bin/env bash
# `pip install ./python` in a fresh venv, as a user types it, then the
# installed backend in use (pip_installed.py):
#   tests/torch/pip_install.sh PYTHON LIBRT_DIST
# PYTHON: a Python with torch (deploy/install_torch.sh's venv); the fresh venv
# is made from its base interpreter and sees that torch through a .pth file,
# as if installed there (torch is 4.6 GB). Offline: pip's build requirements
# come from the wheelhouse deploy/install_torch.sh fills beside that venv.
# Exits 77 (skipped) when PYTHON has no torch.
set -euo pipefail
py=$1 lib=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/torch/need_torch.sh"
need_torch "$py"
wheels=$(dirname "$(dirname "$py")")/wheelhouse
[ -d "$wheels" ] || { echo "FAILED: no wheelhouse at $wheels: run deploy/install_torch.sh"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=$("$py" -c 'import sys; print(sys._base_executable)')
"$base" -m venv "$tmp/venv"
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
purelib "$py" >"$(purelib "$tmp/venv/bin/python")/torch_from_elsewhere.pth"
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$here CCACHE_NOHASHDIR=1
fi
PIP_NO_INDEX=1 PIP_FIND_LINKS=$wheels PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$tmp/venv/bin/pip" install --quiet "$here/python"
cd "$tmp"
RTD_LIBRARY=$lib "$tmp/venv/bin/python" "$here/tests/torch/pip_installed.py"
