#!/usr/bin/env bash
# The README's two commands. On Debian 12, as root (or with sudo):
#   deploy/quickstart.sh run    install what is missing, build, and train the example MLP
#                               on 2 workers under dtrun
#   deploy/quickstart.sh test   install what is missing, build, and run every test
# BUILD_DIR (default build/) and CMAKE_ARGS may be set to change the build.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
mode=${1:-}
case "$mode" in
  run|test) ;;
  *) echo "usage: deploy/quickstart.sh run|test" >&2; exit 2 ;;
esac

deploy/install_deps.sh

build=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
# Where the build uses ccache: a build of another clone of this tree (another
# directory) may serve this one; paths under the tree are hashed relative to
# it and the build directory is not hashed (the debug info's compile
# directory may then name the other clone's).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$here} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"

if [ "$mode" = run ]; then
  exec "$build/launcher/dtrun" --nproc-per-node=2 "$build/examples/01_mlp_cpu/mlp_cpu" --steps 100
fi
cd "$build"
exec ctest --output-on-failure -j "$jobs"
