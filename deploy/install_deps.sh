#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing dtrun / librt_dist needs.
#   deploy/install_deps.sh [--build-only]
# Skips what is already present; needs root (or sudo) only when something is missing.
set -euo pipefail

# What building librt_dist, dtrun, the examples and the .deb needs.
build_packages=(
  build-essential cmake pkg-config ccache git ca-certificates
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libspdlog-dev libfmt-dev libgloo-dev libcli11-dev libopenblas-dev
  dpkg-dev file  # cpack's .deb: dpkg-shlibdeps
)
# What the tests need besides.
test_packages=(
  libopenmpi-dev openmpi-bin libucx-dev libgtest-dev libgmock-dev
  iproute2 procps patchelf clang-format
  slurmctld slurmd slurm-client munge  # the real-Slurm test (tests/slurm)
  openssl                              # the TLS test (tests/netns/tls.sh): its certificates
  debootstrap                          # the package test (tests/deploy): a fresh Debian 12 root
  python3                              # the safetensors reader of tests/checkpoint
  clang libclang-rt-14-dev             # libFuzzer (its runtime is only recommended): tests/fuzz
  python3-matplotlib                   # bench/plots: the docs/ figures from the recorded JSON
  python3-venv python3-pip             # tests/torch: PyTorch in a venv (deploy/install_torch.sh)
  etcd-server etcd-client              # tests/netns/etcd.sh and EtcdClient.*: a real etcd cluster
)

# --build-only: what a build needs, not the tests (deploy/docker/Dockerfile).
packages=("${build_packages[@]}")
if [ "${1:-}" != "--build-only" ]; then packages+=("${test_packages[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# The tests of the PyTorch backend need torch itself, from the package index.
# Without it this fails, unless RTD_SKIP_TORCH_TESTS=1 asks to go on (those
# tests then say they were skipped, and why).
install_torch() {
  [ "${1:-}" = "--build-only" ] && return 0
  # The GPU machine's torch, then the newest release (tests/torch/newest.sh;
  # a new release is tested by raising this version).
  "${sudo_cmd[@]}" "$(dirname "$0")/install_torch.sh" &&
    "${sudo_cmd[@]}" "$(dirname "$0")/install_torch.sh" /opt/rt_dist/torch-venv-newest 2.15.0 &&
    return 0
  if [ "${RTD_SKIP_TORCH_TESTS:-0}" = 1 ]; then
    echo "install_deps: WARNING: torch could not be installed; RTD_SKIP_TORCH_TESTS=1: the tests of the rtd backend (tests/torch) will be skipped" >&2
    return 0
  fi
  echo "install_deps: torch could not be installed (is the Python package index reachable?); set RTD_SKIP_TORCH_TESTS=1 to build and test without the rtd backend's tests" >&2
  exit 1
}

sudo_cmd=()
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && [ ! -w /opt ]; then sudo_cmd=(sudo); fi
  install_torch "${1:-}"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo_cmd=(sudo); else
    echo "install_deps: missing packages and not root; run as root or install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
install_torch "${1:-}"
