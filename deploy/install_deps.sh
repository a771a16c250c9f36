#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing dtrun / librt_dist needs.
# Skips what is already present; needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ccache git ca-certificates
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libspdlog-dev libfmt-dev libgloo-dev libopenmpi-dev openmpi-bin libucx-dev
  libgtest-dev libgmock-dev libcli11-dev libopenblas-dev
  iproute2 procps patchelf file clang-format
  slurmctld slurmd slurm-client munge  # the real-Slurm test (tests/slurm)
  debootstrap dpkg-dev  # the package test (tests/deploy): a fresh Debian 12 root; dpkg-shlibdeps
  python3                              # the safetensors reader of tests/checkpoint
  python3-matplotlib                   # bench/plots: the docs/ figures from the recorded JSON
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo_cmd=(sudo); else
    echo "install_deps: missing packages and not root; run as root or install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
