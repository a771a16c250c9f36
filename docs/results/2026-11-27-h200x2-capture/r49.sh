#!/usr/bin/env bash
# ZeRO-3 on the deeper shape (H=2048, L=48: 48 units), the base library
# (eb19f33, dist/E) and the tree's in turn, two rounds; each run times NCCL's
# kernels and the copy engines (--copy-engines 0,1).
set -u
b=$PWD/dist/gpu
echo "rev $(cat dist/runs/REV)"; nvidia-smi -L
mkdir -p /tmp/o
export NCCL_NVLS_ENABLE=0
for i in 1 2; do
  for l in base tree; do
    d=$b/lib; [ $l = base ] && d=$PWD/dist/E
    LD_LIBRARY_PATH=$d:$b/lib timeout 150 $b/bin/dtrun --nproc-per-node=2 --env RTD_LOG=warn $b/bin/ddp_step --hidden 2048 --layers 48 \
      --shard zero3 --copy-engines 0,1 --reduce bf16 --steps 15 > /tmp/o/zero3_${l}_$i.txt 2>&1
    echo "== zero3 $l $i: exit $?"; grep -E "^\[rank 0\]: zero3" /tmp/o/zero3_${l}_$i.txt | awk '{print $2, $3, $4, $5, $6, $7, $8, $9}'
  done
done
tar czf $OUT/call7.tgz -C /tmp o
