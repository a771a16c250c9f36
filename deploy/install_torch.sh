#!/usr/bin/env bash
# Installs PyTorch for the tests of the rtd backend (tests/torch) into a venv
# of its own, from the Python package index:
#   deploy/install_torch.sh [VENV]     (default /opt/rt_dist/torch-venv)
# The version is the GPU machine's (docs/torch.md): torch 2.11.0. About 4.6 GB
# and a minute or two; does nothing when that venv already has it.
set -euo pipefail
venv=${1:-${RTD_TORCH_VENV:-/opt/rt_dist/torch-venv}}
version=2.11.0

# Beside torch: the Python linter (CTest lint.python), and a wheelhouse of
# what `pip install ./python` needs to build (tests/torch/pip_install.sh
# installs it offline from there).
ruff_version=0.17.6
extras() {
  "$venv/bin/ruff" --version 2>/dev/null | grep -q "$ruff_version" ||
    "$venv/bin/pip" install --quiet --disable-pip-version-check "ruff==$ruff_version"
  [ -d "$venv/wheelhouse" ] || wheelhouse
}
wheelhouse() {
  "$venv/bin/pip" download --quiet --disable-pip-version-check -d "$venv/wheelhouse" \
    "scikit-build-core>=0.10"
}
if [ -x "$venv/bin/python" ] &&
   [ "$("$venv/bin/python" -c 'import torch, expecttest; print(torch.__version__.split("+")[0])' 2>/dev/null)" = "$version" ]; then
  echo "install_torch: torch $version present in $venv"
  extras
  exit 0
fi
echo "install_torch: installing torch $version into $venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "torch==$version" numpy expecttest
extras
"$venv/bin/python" -c 'import torch; print("install_torch: torch", torch.__version__)'
