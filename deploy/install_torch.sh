#!/usr/bin/env bash
# Installs PyTorch for the tests of the rtd backend (tests/torch) into a venv
# of its own, from the Python package index:
#   deploy/install_torch.sh [VENV [VERSION]]
# By default the GPU machine's torch (docs/torch.md), 2.11.0, into
# /opt/rt_dist/torch-venv; install_deps.sh also installs the newest release
# into /opt/rt_dist/torch-venv-newest (tests/torch/newest.sh). About 5 GB
# and a minute or two each; does nothing when that venv already has it.
set -euo pipefail
venv=${1:-${RTD_TORCH_VENV:-/opt/rt_dist/torch-venv}}
version=${2:-2.11.0}
main=1; [ -n "${2:-}" ] && main=0  # the linter and the wheelhouse live in the main venv only

# Beside torch: the Python linter (CTest lint.python), and a wheelhouse of
# what `pip install ./python` needs to build (tests/torch/pip_install.sh
# installs it offline from there).
ruff_version=0.17.6
extras() {
  [ $main = 1 ] || return 0
  "$venv/bin/ruff" --version 2>/dev/null | grep -q "$ruff_version" ||
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "ruff==$ruff_version"
  [ -d "$venv/wheelhouse" ] || wheelhouse
}
wheelhouse() {
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check -d "$venv/wheelhouse" \
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
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$version" numpy expecttest
extras
"$venv/bin/python" -c 'import torch; print("install_torch: torch", torch.__version__)'
