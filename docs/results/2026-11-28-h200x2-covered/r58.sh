#!/usr/bin/env bash
# Where our layer's cost goes on the host: the paired bench (with the raw_end_cap
# row: the driver's capture question) over library variants each built
# without one part of the layer (tree: none removed).
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L; nvidia-smi topo -m | head -4; nproc; lscpu | grep -E "Model name|L1d|L1i|L2|L3"
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
P="--mode paired --ops all_reduce,all_gather,reduce_scatter --dtypes float32 --min-bytes 16 --max-bytes 1M --factor 256 --iters 200 --blocks 21"
for f in dist/abl/*/librt_dist.so.0.xz; do xz -dk $f; done
for i in 1 2; do
  for lib in tree nocap norec nowork nowatch all; do
    LD_LIBRARY_PATH=$PWD/dist/abl/$lib:$b/lib timeout 100 $b/bin/dtrun --nproc-per-node=2 $b/bin/collective_bench $P > /tmp/o/abl_${lib}_$i.txt 2>&1
    echo "== $lib $i: exit $? $SECONDS s"
  done
done
tar czf $OUT/call1.tgz -C /tmp o
