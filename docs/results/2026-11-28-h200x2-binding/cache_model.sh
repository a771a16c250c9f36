#!/usr/bin/env bash
# Our layer's instructions and first-level cache misses a call under
# callgrind's cache model (32 KB instruction, 48 KB data), with the stand-in
# NCCL call walking 48 KB first (nccl_layer_cost --evict 48). Counted outside
# the benchmark's own code (the stand-ins and the walk), as the difference
# between 4000 and 2000 calls a row (start-up left out), over the six rows of
# ours (three operations, each on the caller's stream and on ours).
#   cache_model.sh LIBDIR TAG   (LIBDIR: the librt_dist to load)
set -eu
lib=$1 tag=$2
bench=${BENCH:-build/bench/nccl_layer_cost}
for n in 2000 4000; do
  LD_LIBRARY_PATH=$lib valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 \
    --D1=49152,12,64 --LL=2097152,16,64 --callgrind-out-file=/tmp/cg.$tag.$n \
    "$bench" --calls $n --blocks 1 --evict 48 >/dev/null 2>&1
  callgrind_annotate --auto=no --threshold=100 --show-percs=no --show=Ir,I1mr,D1mr,D1mw \
    /tmp/cg.$tag.$n 2>/dev/null | grep -v -E "nccl_layer_cost\]|anonymous namespace|PROGRAM TOTALS" |
    awk '/^ *[0-9,]+ /{gsub(",", "", $0); ir += $1; i1 += $2; dr += $3; dw += $4}
         END {printf "%.0f %.0f %.0f %.0f\n", ir, i1, dr, dw}' >/tmp/cg.$tag.$n.sum
done
python3 - "$tag" <<'PY'
import sys
tag = sys.argv[1]
a = [int(x) for x in open(f'/tmp/cg.{tag}.2000.sum').read().split()]
b = [int(x) for x in open(f'/tmp/cg.{tag}.4000.sum').read().split()]
d = [(y - x) / (2000 * 6) for x, y in zip(a, b)]
print(f"{tag}: a call: instructions {d[0]:.0f}, instruction misses {d[1]:.1f}, "
      f"data read misses {d[2]:.1f}, data write misses {d[3]:.1f}")
PY
