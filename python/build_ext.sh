#!/usr/bin/env bash
# Builds the rtd backend's extension (rt_dist.torch._C) against PYTHON's torch
# with the C++ compiler alone, for a machine that has torch and a compiler but
# not this project's build (its CMake build does the same from
# python/CMakeLists.txt):
#   python/build_ext.sh PYTHON PACKAGE_DIR
# PACKAGE_DIR: the folder holding rt_dist/ (a bundle's lib/rt_dist/python).
# CXX: the compiler (default c++; "ccache c++" keeps the objects for next time).
set -euo pipefail
py=${1:?usage: python/build_ext.sh PYTHON PACKAGE_DIR} dest=${2:?usage: python/build_ext.sh PYTHON PACKAGE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t info < <("$py" "$here/torch_build_info.py")
version=${info[0]} libdir=${info[2]} suffix=${info[3]}
IFS=, read -r -a includes <<<"${info[1]}"
flags=(-O2 -g0 -std=c++20 -fPIC -fvisibility=hidden -DTORCH_EXTENSION_NAME=_C
  -DTORCH_API_INCLUDE_EXTENSION_H "-DTORCH_BUILT_WITH=\"$version\"" -I"$here/../runtime/include")
for i in "${includes[@]}"; do flags+=(-isystem "$i"); done
objs=$(mktemp -d)
trap 'rm -rf "$objs"' EXIT
ls "$here"/csrc/*.cc | xargs -P "$(nproc)" -I{} sh -c \
  '${CXX:-c++} "$@" -c "$0" -o "'"$objs"'/$(basename "$0" .cc).o"' {} "${flags[@]}"
mkdir -p "$dest/rt_dist/torch"
${CXX:-c++} -shared -o "$dest/rt_dist/torch/_C$suffix" "$objs"/*.o -L"$libdir" -lc10 -ltorch -ltorch_cpu \
  -ltorch_python -ldl -Wl,-rpath,"$libdir"
echo "build_ext: $dest/rt_dist/torch/_C$suffix for torch $version"
