#!/usr/bin/env bash
# A/B of the spare's preload: the bundle (new spare.py) against a copy with the spare.py before it,
# in turns; then the CUDA kill cases on the new code. Everything kept in $OUT/all.tgz.
set -u
OUT=$1 W=$1/work
mkdir -p $W
B=$PWD/dist/gpu
export PATH=/opt/gcc/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
(CXX=g++ python/build_ext.sh python3 $B/lib/rt_dist/python > $W/ext.log 2>&1) || { tail -20 $W/ext.log; exit 1; }
rm -rf /tmp/before && cp -a $B /tmp/before && cp $B/before_spare.py /tmp/before/lib/rt_dist/python/rt_dist/spare.py
diff -q $B/lib/rt_dist/python/rt_dist/spare.py /tmp/before/lib/rt_dist/python/rt_dist/spare.py
export RTD_REQUIRE_GPU=1
for round in 1 2 3; do
  for v in new before warm; do
    d=$B; [ $v = before ] && d=/tmp/before
    extra=""; [ $v = warm ] && extra="RTD_SPARE_IMPORTS=rtd_warm PYTHONPATH=$B/warm"
    env $extra TIME_ONLY=1 TIME_LAYERS=21 TIME_SIZE=4096 TIME_VARIANTS="1,1,1" KEEP_LOGS=$W/r$round-$v \
      tests/torch/recovery.sh python3 $d/bin/dtrun cuda > $W/r$round-$v.log 2>&1
    echo "== round $round $v rc=$? $(date +%T)"
    grep -h "from the kill\|recovered in generation\|joined generation\|generation 1 started" $W/r$round-$v.log | grep -v "^  time" | sort -u
  done
done
[ $SECONDS -lt 400 ] && { timeout 180 tests/torch/recovery.sh python3 $B/bin/dtrun cuda > $W/kill-cases.log 2>&1; echo "== kill cases rc=$?"; }
[ -f $W/kill-cases.log ] && grep "^ok\|FAILED" $W/kill-cases.log | head -30
(cd $OUT && tar czf all.tgz work && rm -rf work)
