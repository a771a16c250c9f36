#!/bin/bash
# Builds one librt_dist variant with ablation defines into /tmp/abl/NAME:
#   build_ablation.sh NAME "-DRTD_ABL_NOCAP ..."
set -e
REPO=${REPO:?set REPO to a checkout of 0b26206 with ablation.patch applied, built in build/}
cd $REPO/build/runtime
FLAGS="-DFMT_SHARED -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -Drt_dist_EXPORTS -I$REPO/runtime/include -I$REPO/build/proto -I$REPO -isystem /usr/local/cuda/include -O2 -g -DNDEBUG -fPIC -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -DNOMINMAX -std=c++20"
link=$(cat CMakeFiles/rt_dist.dir/link.txt)
build_one() {
  name=$1; defs=$2; out=/tmp/abl/$name; mkdir -p $out
  c++ $FLAGS $defs -c $REPO/collectives/nccl/nccl_communicator.cc -o $out/nc.o
  c++ $FLAGS $defs -c $REPO/collectives/nccl/comm_state.cc -o $out/cs.o
  l=$(echo "$link" | sed "s# -o ../lib/librt_dist.so.0.1.0 # -o $out/librt_dist.so.0 #")
  ncobj=$(echo "$l" | grep -o '[^ ]*nccl_communicator.cc.o')
  csobj=$(echo "$l" | grep -o '[^ ]*comm_state.cc.o')
  l=${l/$ncobj/$out/nc.o}; l=${l/$csobj/$out/cs.o}
  eval "$l"
  strip --strip-debug $out/librt_dist.so.0; rm $out/*.o
}
build_one "$@"
